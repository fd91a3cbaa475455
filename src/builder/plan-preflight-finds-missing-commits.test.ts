import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDatasetPlan, loadRecipePlan } from './plan-load.js';
import { preflightRepos } from './plan-preflight.js';
import { planCounts } from './plan.js';

const TEST = resolve(import.meta.dirname, '../../recipes/test');
let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'preflight-'));
  execFileSync(join(TEST, 'make-repo.sh'), [join(work, 'repos', 'test', 'shlib')]);
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('preflightRepos', () => {
  it('passes a dataset whose commits are all in the local repositories', async () => {
    const plan = await loadDatasetPlan({ dataset: join(TEST, 'dataset.jsonl'), specs: join(TEST, 'specs.yaml'), repos: join(work, 'repos') });
    expect(planCounts(plan)).toEqual({ base: 1, env: 1, history: 1, instance: 2 });
    expect(plan.dataset).toBe('test');
    expect(await preflightRepos(plan)).toEqual([]);
  });

  it('names the dataset line of a missing commit and of a missing repository', async () => {
    const rows = execFileSync('cat', [join(TEST, 'dataset.jsonl')], { encoding: 'utf8' })
      .trim()
      .split('\n');
    const bad = JSON.parse(rows[1]!) as Record<string, unknown>;
    bad.base_commit = 'deadbeef'.repeat(5);
    const other = { ...(JSON.parse(rows[0]!) as Record<string, unknown>), instance_id: 'x__y-1', repo: 'x/y' };
    const file = join(work, 'bad.jsonl');
    await writeFile(file, `${rows[0]}\n${JSON.stringify(bad)}\n${JSON.stringify(other)}\n`);
    const specs = join(work, 'specs.yaml');
    await writeFile(
      specs,
      `base: ${join(TEST, 'base.yaml')}\nrepos:\n  test/shlib: {"1.0": {env: ${join(TEST, 'env.yaml')}, ` +
        `testCmd: t}}\n  x/y: {"1.0": {env: ${join(TEST, 'env.yaml')}, testCmd: t}}\n`,
    );
    const plan = await loadDatasetPlan({ dataset: file, specs, repos: join(work, 'repos'), name: 'bad' });
    const problems = await preflightRepos(plan);
    expect(problems.map((p) => p.id).sort()).toEqual(['instance:test__shlib-2', 'instance:x__y-1']);
    expect(problems.find((p) => p.id === 'instance:test__shlib-2')?.message).toBe(
      `${file}:2: commit ${'deadbeef'.repeat(5)} not found in ${join(work, 'repos', 'test', 'shlib')} (update the mirror with git fetch, or fix base_commit)`,
    );
    expect(problems.find((p) => p.id === 'instance:x__y-1')?.message).toMatch(new RegExp(`^${file}:3: repository .*x/y does not exist`));
  });

  it('plans a single recipe file with its parents', async () => {
    const plan = await loadRecipePlan(join(TEST, 'env.yaml'), 'test/env');
    expect(plan.nodes.map((n) => [n.kind, n.tag])).toEqual([
      ['base', null],
      ['env', 'test/env'],
    ]);
  });
});
