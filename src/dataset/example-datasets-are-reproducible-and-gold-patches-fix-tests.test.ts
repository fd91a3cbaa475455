import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { datasetNameFromFile, defaultRepoSource, planCounts, planDataset } from '../builder/plan.js';
import { checkoutAtCommit, hasObject } from '../recipe/checkout.js';
import { loadDataset } from './read.js';
import type { LocatedRow } from './row.js';
import { loadSpecs } from './specs.js';

const RECIPES = resolve(import.meta.dirname, '../../recipes');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const HAVE_PYTEST = spawnSync('python3', ['-m', 'pytest', '--version']).status === 0;
if (!HAVE_PYTEST) console.warn('demo dataset: python3 -m pytest is not available (apt-get install python3-pytest); skipping the part that runs its tests');

interface ExampleSet {
  set: string;
  repo: string;
  /** Test command; test ids are appended. */
  runner: string[];
  runnable: boolean;
  counts: { base: number; env: number; history: number; instance: number };
}

const SETS: ExampleSet[] = [
  {
    set: 'demo',
    repo: 'demo/pycalc',
    runner: ['python3', '-m', 'pytest', '-rA', '-p', 'no:cacheprovider'],
    runnable: HAVE_PYTEST,
    counts: { base: 1, env: 2, history: 0, instance: 4 },
  },
  { set: 'test', repo: 'test/shlib', runner: ['sh', 'run_tests.sh'], runnable: true, counts: { base: 1, env: 1, history: 0, instance: 2 } },
];

describe.each(SETS)('example dataset recipes/$set', (ex) => {
  const dir = join(RECIPES, ex.set);
  let work: string;
  let repo: string;
  let rows: LocatedRow[];

  const makeRepo = (out: string): string => execFileSync(join(dir, 'make-repo.sh'), [out], { encoding: 'utf8' });

  /** The tree at `commit` with `patches` applied, outside any repository (as a scorer sees it). */
  async function tree(commit: string, patches: string[]): Promise<string> {
    const t = await mkdtemp(join(work, 'tree-'));
    execFileSync('sh', ['-c', 'git -C "$1" archive "$2" | tar -x -C "$3"', 'sh', repo, commit, t], { env: GIT_ENV });
    for (const p of patches) execFileSync('git', ['apply', '-'], { cwd: t, input: p, env: GIT_ENV });
    return t;
  }

  /** Status of each test, from pytest -rA style lines (`PASSED file::name`); a run is per file, as SWE-bench does. */
  function runTests(cwd: string, tests: string[]): Map<string, string> {
    const files = [...new Set(tests.map((t) => t.split('::')[0]!))];
    const r = spawnSync(ex.runner[0]!, [...ex.runner.slice(1), ...files], {
      cwd,
      encoding: 'utf8',
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', PYTEST_DISABLE_PLUGIN_AUTOLOAD: '1' },
    });
    const status = new Map<string, string>();
    for (const m of r.stdout.matchAll(/^(PASSED|FAILED|ERROR) (\S+::\S+)/gm)) status.set(m[2]!, m[1]!);
    return status;
  }

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), `${ex.set}-`));
    repo = join(work, ex.repo);
    makeRepo(repo);
    rows = await loadDataset(join(dir, 'dataset.jsonl'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('make-repo.sh reproduces the same commit ids, and they are the dataset base commits', async () => {
    const again = makeRepo(join(work, 'again'));
    const log = execFileSync('git', ['-C', repo, 'log', '--format=%H %s'], { encoding: 'utf8', env: GIT_ENV });
    expect(again).toBe(log);
    const ids = log.split('\n').map((l) => l.split(' ')[0]);
    expect(rows.length).toBe(ex.counts.instance);
    for (const { row } of rows) expect(ids).toContain(row.base_commit);
  });

  it('loads its specs and recipes and plans one node per distinct layer', async () => {
    const specs = await loadSpecs(join(dir, 'specs.yaml'));
    const plan = planDataset({ dataset: datasetNameFromFile(join(dir, 'dataset.jsonl')), rows, specs, repoSource: defaultRepoSource(work) });
    expect(planCounts(plan)).toEqual(ex.counts);
    expect(plan.nodes.filter((n) => n.tag !== null).map((n) => n.tag)).toEqual(rows.map((r) => `${ex.set}/${r.row.instance_id}`));
    for (const n of plan.nodes.filter((x) => x.kind === 'instance')) expect(n.recipe).toMatchObject({ repo: { path: join(work, ex.repo) } });
  });

  it('gold and test patches apply to their base commits, whose checkouts hide the fix', async () => {
    for (const { row } of rows) {
      const t = await tree(row.base_commit, []);
      for (const p of [row.test_patch, row.patch]) execFileSync('git', ['apply', '--check', '-'], { cwd: t, input: p, env: GIT_ENV });
      const fix = execFileSync('git', ['-C', repo, 'rev-list', '--reverse', '--ancestry-path', `${row.base_commit}..main`], {
        encoding: 'utf8',
        env: GIT_ENV,
      }).split('\n')[0]!;
      const co = join(work, `co-${row.instance_id}`);
      await checkoutAtCommit({ source: { path: repo }, commit: row.base_commit, target: co });
      expect(await hasObject(co, row.base_commit)).toBe(true);
      expect(await hasObject(co, fix)).toBe(false);
    }
  });

  it.skipIf(!ex.runnable)('FAIL_TO_PASS fail before and pass after the gold patch; PASS_TO_PASS pass in both (runs the tests)', async () => {
    for (const { row } of rows) {
      const tests = [...row.FAIL_TO_PASS, ...row.PASS_TO_PASS];
      expect(row.FAIL_TO_PASS.length).toBeGreaterThan(0);
      const before = runTests(await tree(row.base_commit, [row.test_patch]), tests);
      const after = runTests(await tree(row.base_commit, [row.test_patch, row.patch]), tests);
      for (const t of row.FAIL_TO_PASS) expect([row.instance_id, t, before.get(t)]).toEqual([row.instance_id, t, 'FAILED']);
      for (const t of row.PASS_TO_PASS) expect([row.instance_id, t, before.get(t)]).toEqual([row.instance_id, t, 'PASSED']);
      for (const t of tests) expect([row.instance_id, t, after.get(t)]).toEqual([row.instance_id, t, 'PASSED']);
    }
  });
});
