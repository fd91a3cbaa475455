/**
 * A mirror that does not hold a repository's old history (a shallow clone: `git clone --depth`)
 * failed its shared-history step ("Failed to traverse parents of commit ...": the store took the
 * commits but not the mirror's shallow boundary) and every instance of it was skipped, though the
 * commits they need are all there. Built from such a mirror, the history layer and the instances
 * hold what it has, marked shallow where it ends, so git walks their history without error and
 * still reaches nothing after an instance's commit.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { LocalRegistry } from '../registry/local.js';
import { pullEnv } from '../store/pull.js';
import { gitInLayers } from '../../test/helpers/git-in-layers.js';
import { StorePaths } from '../store/paths.js';
import { executePlan } from './execute.js';
import { computeRepoHistories } from './plan-history.js';
import { defaultRepoSource, planDataset } from './plan.js';

const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' };
const work = mkdtempSync(join(tmpdir(), 'ms-shallow-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const full = join(work, 'full/test/shlib');
const repos = join(work, 'repos');
const git = (dir: string, ...args: string[]): string => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', env: GIT_ENV });
/** Commit ids, oldest first. */
let ids: string[];

beforeAll(() => {
  cpSync(resolve('recipes/test'), join(work, 'recipes'), { recursive: true, filter: (src) => !src.includes('/repos') });
  execFileSync(resolve('recipes/test/make-repo.sh'), [full]);
  for (const n of [1, 2, 3]) {
    writeFileSync(join(full, 'README'), `shlib, revision ${n}\n`);
    git(full, '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qam', `Revision ${n}`);
  }
  ids = git(full, 'rev-list', '--reverse', 'main').trim().split('\n');
  // the mirror holds the last four commits: ids[3] is where its history ends
  execFileSync('git', ['clone', '-q', '--depth', '4', `file://${full}`, join(repos, 'test/shlib')], { env: GIT_ENV });
  expect(git(join(repos, 'test/shlib'), 'rev-parse', '--is-shallow-repository').trim()).toBe('true');
  const row = (n: number, base: string) => JSON.stringify({ instance_id: `test__shlib-${n}`, repo: 'test/shlib', base_commit: base, version: '1.0' });
  // one instance at the boundary itself (its shared history is that one commit), two past it
  writeFileSync(join(work, 'recipes/dataset.jsonl'), `${row(1, ids[3]!)}\n${row(2, ids[5]!)}\n${row(3, ids[6]!)}\n`);
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('a dataset whose mirror is shallow', () => {
  it('builds its history layer and every instance, and git walks their history to where the mirror ends', async () => {
    const rows = await loadDataset(join(work, 'recipes/dataset.jsonl'));
    const repoSource = defaultRepoSource(repos);
    const histories = await computeRepoHistories(rows, repoSource);
    expect(histories.get('test/shlib')?.base).toBe(ids[3]);
    const plan = planDataset({ dataset: 'shallow', rows, specs: await loadSpecs(join(work, 'recipes/specs.yaml')), repoSource, histories });
    const out = await executePlan(plan, { registry: reg, store, logDir: join(work, 'logs'), jobs: 2, keepGoing: true, force: false, timeoutMs: 120_000 });
    expect(out.map((r) => [r.kind, r.status, r.error ?? ''])).toEqual([
      ['base', 'built', ''],
      ['env', 'built', ''],
      ['history', 'built', ''],
      ['instance', 'built', ''],
      ['instance', 'built', ''],
      ['instance', 'built', ''],
    ]);
    for (const [i, n] of [
      [3, 1],
      [5, 2],
      [6, 3],
    ] as const) {
      const pulled = await pullEnv(reg, store, `shallow/test__shlib-${n}`, { idShift: 0 });
      // the history layer, and the checkout's (the install step's writes are a layer above it)
      const history = pulled.layerDirs.find((d) => existsSync(join(d, 'opt/minisandbox')));
      const instance = [...pulled.layerDirs].reverse().find((d) => existsSync(join(d, 'testbed/.git')));
      if (history === undefined || instance === undefined) throw new Error(`no history or checkout layer in ${pulled.layerDirs.join(' ')}`);
      const log = gitInLayers(history, instance, ['log', '--format=%H']);
      expect(log.stderr).toBe('');
      // from its commit back to where the mirror's history ends, nothing later
      expect(log.stdout.trim().split('\n')).toEqual(ids.slice(3, i + 1).reverse());
      expect(gitInLayers(history, instance, ['rev-list', '--all']).stdout.trim().split('\n')).toEqual(ids.slice(3, i + 1).reverse());
      const fsck = gitInLayers(history, instance, ['fsck', '--no-dangling', '--connectivity-only']);
      expect([fsck.status, fsck.stderr]).toEqual([0, '']);
      expect(gitInLayers(history, instance, ['status', '--porcelain'])).toMatchObject({ status: 0, stdout: '' });
    }
  });
});
