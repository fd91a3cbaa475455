/**
 * The project's own datasets, scored for real on the host: every gold patch resolves its instance
 * and an empty patch does not, with rows, specs and parsers read through the dataset module.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs, lookupSpec } from '../dataset/specs.js';
import { evalSpecFromDataset } from './dataset-spec.js';
import { hostEvalRunner } from './host-runner.js';
import { parseScoreInstance, type ScoreInstance } from './instance.js';
import type { RunnerFactory } from './score-run.js';
import type { EvalSpecInput } from './spec.js';
import { validateInstances } from './validate.js';
import { scoreInstance } from './score-instance.js';
import { longRepo } from '../../test/helpers/long-repo.js';

const RECIPES = resolve(import.meta.dirname, '../../recipes');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'score-datasets-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** One working tree per instance at its base commit, cloned from the generated project. */
async function prepare(name: 'test' | 'demo' | 'long' | 'pyunit') {
  let origin = join(root, name, 'origin');
  if (name === 'long') origin = await longRepo();
  else execFileSync(join(RECIPES, name, 'make-repo.sh'), [origin], { stdio: ['ignore', 'ignore', 'inherit'] });
  const rows = (await loadDataset(join(RECIPES, name, 'dataset.jsonl'))).map((r) => r.row);
  const specs = await loadSpecs(join(RECIPES, name, 'specs.yaml'));
  const trees = new Map<string, string>();
  for (const row of rows) {
    const dir = join(root, name, row.instance_id);
    execFileSync('git', ['clone', '-q', '--shared', '--no-checkout', origin, dir], { env: GIT_ENV });
    execFileSync('git', ['checkout', '-q', row.base_commit], { cwd: dir, env: GIT_ENV });
    trees.set(row.instance_id, dir);
  }
  const specFor = (i: ScoreInstance): EvalSpecInput => ({
    ...evalSpecFromDataset(lookupSpec(specs, i.repo, i.version, i.instance_id)),
    workdir: trees.get(i.instance_id)!,
  });
  // Runs of one instance share its tree on the host: serialise them and start each from the base.
  const tails = new Map<string, Promise<unknown>>();
  const factory: RunnerFactory = (instance) => {
    const host = hostEvalRunner();
    const dir = trees.get(instance.instance_id)!;
    return (files, script, opts) => {
      const run = (tails.get(dir) ?? Promise.resolve()).then(() => {
        execFileSync('git', ['reset', '-q', '--hard', instance.base_commit], { cwd: dir, env: GIT_ENV });
        execFileSync('git', ['clean', '-qfdx'], { cwd: dir, env: GIT_ENV });
        return host(files, script, opts);
      });
      tails.set(
        dir,
        run.catch(() => undefined),
      );
      return run;
    };
  };
  return { rows, specFor, factory, filesDir: (i: ScoreInstance) => join(root, name, 'files', i.instance_id) };
}

function pythonAtLeast311(): boolean {
  try {
    execFileSync('python3', ['-c', 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function hasPytest(): boolean {
  try {
    execFileSync('python3', ['-c', 'import pytest'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe("the project's datasets, gold and empty patches", () => {
  it('recipes/test (shell project, pytest-style output): gold resolves, empty does not, on every instance', async () => {
    const d = await prepare('test');
    expect(d.rows.length).toBeGreaterThan(0);
    const report = await validateInstances(d.rows, d.specFor, d.factory, { runs: 1, jobs: 2, timeoutS: 120, filesDir: d.filesDir });
    expect(report.errors).toEqual([]);
    expect(report.ok_ids).toEqual(d.rows.map((r) => parseScoreInstance(r).instance_id).sort());
  });

  it('recipes/long (24 instances across a 3000-commit history): gold resolves, empty does not, on every instance', async () => {
    const d = await prepare('long');
    expect(d.rows.length).toBe(24);
    const report = await validateInstances(d.rows, d.specFor, d.factory, { runs: 1, jobs: 2, timeoutS: 120, filesDir: d.filesDir });
    expect(report.failures).toEqual([]);
    expect(report.ok_ids).toEqual(d.rows.map((r) => r.instance_id).sort());
  }, 300_000);

  // Debian bookworm's python3 is 3.11: its log spells every name the other way from the dataset.
  it.skipIf(!pythonAtLeast311())(
    'recipes/pyunit (unittest, dataset names as Python <= 3.10 printed them, log from >= 3.11): gold resolves through the other spelling, empty does not',
    async () => {
      const d = await prepare('pyunit');
      const report = await validateInstances(d.rows, d.specFor, d.factory, { runs: 1, jobs: 1, timeoutS: 120, filesDir: d.filesDir });
      expect(report.failures).toEqual([]);
      expect(report.ok_ids).toEqual(['test__mathx-1']);
      // and the result says how many names matched by the other spelling
      const row = parseScoreInstance(d.rows[0]!);
      const runner = await d.factory(row);
      const { result, log } = await scoreInstance(row, d.specFor(row), row.patch, runner, { timeoutMs: 120_000, filesDir: d.filesDir(row) });
      expect(log).toContain('test_triple (tests.test_mathx.MathTests.test_triple) ... ok');
      expect(result.resolved).toBe(true);
      expect(result.other_spelling).toEqual(['test_double (tests.test_mathx.MathTests)', 'test_triple (tests.test_mathx.MathTests)']);
    },
  );

  // The demo project's tests need pytest; bin/setup installs python3 but not python3-pytest.
  it.skipIf(!hasPytest())('recipes/demo (pytest -rA): gold resolves, empty does not, on every instance', async () => {
    const d = await prepare('demo');
    const report = await validateInstances(d.rows, d.specFor, d.factory, { runs: 1, jobs: 2, timeoutS: 120, filesDir: d.filesDir });
    expect(report.errors).toEqual([]);
    expect(report.ok_ids).toEqual(d.rows.map((r) => r.instance_id).sort());
  });
});
