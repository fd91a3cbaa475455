/**
 * Building the long-history dataset (recipes/long: 3000 commits, 24 instances spread over them) on
 * the hermetic busybox env: the shared history is one layer every instance stacks on, an added
 * instance costs the registry its own changes and its own new history only, and a built instance
 * reaches no commit after its base (checked with git on the layers as the sandbox sees them).
 */
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocatedRow } from '../dataset/row.js';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { hasObject } from '../recipe/checkout.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pullEnv } from '../store/pull.js';
import { executePlan } from './execute.js';
import { gitInLayers } from '../../test/helpers/git-in-layers.js';
import { longRepo } from '../../test/helpers/long-repo.js';
import { computeRepoHistories, historyPath, type RepoHistory } from './plan-history.js';
import { defaultRepoSource, planDataset } from './plan.js';

const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const work = mkdtempSync(join(tmpdir(), 'ms-history-build-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const repos = join(work, 'repos');
const source = join(repos, 'test/longlib');
const repoSource = defaultRepoSource(repos);
const opts = { registry: reg, store, logDir: join(work, 'logs'), jobs: 2, keepGoing: false, force: false, timeoutMs: 120_000 };
let rows: LocatedRow[];
let histories: Map<string, RepoHistory>;

beforeAll(async () => {
  cpSync(resolve('recipes/test'), join(work, 'recipes/test'), { recursive: true, filter: (src) => !src.includes('/repos') });
  cpSync(resolve('recipes/long'), join(work, 'recipes/long'), { recursive: true, filter: (src) => !src.includes('/repos') });
  // a clone of the shared copy (made once per machine), as a mirror would be
  await promisify(execFile)('git', ['clone', '-q', '--shared', await longRepo(), source]);
  rows = await loadDataset(join(work, 'recipes/long/dataset.jsonl'));
  // From the whole dataset, as the CLI does: any subset built plans the same history layer.
  histories = await computeRepoHistories(rows, repoSource);
}, 300_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function build(n: number) {
  const plan = planDataset({ dataset: 'long', rows: rows.slice(0, n), specs: await loadSpecs(join(work, 'recipes/long/specs.yaml')), repoSource, histories });
  return executePlan(plan, opts);
}

const git = (...args: string[]): string => execFileSync('git', ['-C', source, ...args], { encoding: 'utf8', env: GIT_ENV, maxBuffer: 1 << 28 });
const registryBytes = (): number => Number(execFileSync('du', ['-sb', '--apparent-size', join(work, 'registry')], { encoding: 'utf8' }).split('\t')[0]);
/** Bytes of a pack of the objects after `from` up to `to`: an instance's own new history. */
const historyBytes = (from: string, to: string): number =>
  execFileSync('git', ['-C', source, 'pack-objects', '--stdout', '--revs'], { input: `${to}\n^${from}\n`, env: GIT_ENV, maxBuffer: 1 << 28 }).length;
/** Bytes of the files that differ between two commits' trees (at `to`). */
const changedBytes = (from: string, to: string): number =>
  git('diff', '--name-only', '--no-renames', '--diff-filter=AM', from, to)
    .split('\n')
    .filter((p) => p !== '')
    .reduce((sum, p) => sum + Number(git('cat-file', '-s', `${to}:${p}`).trim()), 0);
/** One full image of an instance's checkout with its whole history, as `tar | zstd -3` makes it. */
const fullImageBytes = (commit: string): number => {
  const dir = mkdtempSync(join(work, 'full-'));
  execFileSync('git', ['clone', '-q', '--no-local', source, join(dir, 'testbed')], { env: GIT_ENV });
  execFileSync('git', ['-C', join(dir, 'testbed'), 'checkout', '-q', commit], { env: GIT_ENV });
  const n = Number(execFileSync('sh', ['-c', 'tar -C "$1" -cf - testbed | zstd -3 -q -c | wc -c', 'sh', dir], { encoding: 'utf8' }).trim());
  rmSync(dir, { recursive: true, force: true });
  return n;
};

describe('a dataset with a long history', () => {
  it('builds one history layer under every instance; an added instance costs only its changes and its own new history', async () => {
    const first = await build(3);
    expect(first.map((r) => [r.kind, r.status])).toEqual([
      ['base', 'built'],
      ['env', 'built'],
      ['history', 'built'],
      ['instance', 'built'],
      ['instance', 'built'],
      ['instance', 'built'],
    ]);
    const base = histories.get('test/longlib')!.base;
    expect(base).toBe(rows[0]!.row.base_commit); // a linear history: the oldest base is the merge base

    for (const n of [4, 5]) {
      const before = registryBytes();
      const again = await build(n);
      expect(again.filter((r) => r.status === 'built').map((r) => r.label)).toEqual([rows[n - 1]!.row.instance_id]);
      const growth = registryBytes() - before;
      const prev = rows[n - 2]!.row.base_commit;
      const commit = rows[n - 1]!.row.base_commit;
      // Its own history past the previous instance, its changed files, its git index (stat data
      // of every file), and a manifest and env config: bounded, and a small part of a full image.
      const index = Number(execFileSync('sh', ['-c', 'git -C "$1" ls-files | wc -l', 'sh', source], { encoding: 'utf8', env: GIT_ENV })) * 100;
      const bound = historyBytes(prev, commit) + changedBytes(prev, commit) + index + (64 << 10);
      expect(growth).toBeGreaterThan(0);
      expect(growth).toBeLessThan(bound);
      // Here ~10%: consecutive instances are 125 commits apart and differ in ~15% of their files
      // (the segment pack stores the first new version of each touched file whole: packs on disk
      // cannot delta against another pack).
      expect(growth).toBeLessThan(fullImageBytes(commit) / 8);
    }
  }, 600_000);

  it('a built instance reaches no commit after its base, and git works in it over the history layer', async () => {
    const row = rows[2]!.row;
    const pulled = await pullEnv(reg, store, `long/${row.instance_id}`, { idShift: 0 });
    const [history, instance] = pulled.layerDirs.slice(-2) as [string, string];
    // the checkout borrows from the history layer at the path the sandbox sees
    expect(readFileSync(join(instance, 'testbed/.git/objects/info/alternates'), 'utf8')).toBe(`${historyPath('test/longlib')}/objects\n`);
    const log = gitInLayers(history, instance, ['log', '--format=%H']);
    expect(log.status).toBe(0);
    const commits = log.stdout.trim().split('\n');
    expect(commits[0]).toBe(row.base_commit);
    expect(commits.length).toBe(Number(git('rev-list', '--count', row.base_commit).trim()));
    expect(gitInLayers(history, instance, ['rev-list', '--all']).stdout.trim().split('\n').length).toBe(commits.length);
    // the fix and everything after: in neither layer
    const fix = git('rev-list', '--reverse', '--ancestry-path', `${row.base_commit}..main`).split('\n')[0]!;
    expect(await hasObject(join(instance, 'testbed'), fix)).toBe(false);
    expect(await hasObject(join(history, historyPath('test/longlib')), fix)).toBe(false);
    expect(await hasObject(join(history, historyPath('test/longlib')), git('rev-parse', 'main').trim())).toBe(false);
    // what scoring does: status, diff, apply
    expect(gitInLayers(history, instance, ['status', '--porcelain']).stdout).toBe('');
    const apply = gitInLayers(history, instance, ['apply', '--check', '-'], row.patch as string);
    expect(apply.status).toBe(0);
    expect(gitInLayers(history, instance, ['fsck', '--no-dangling', '--connectivity-only']).status).toBe(0);
  }, 300_000);
});
