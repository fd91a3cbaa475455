import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkoutAtCommit, hasObject, makeSharedHistory } from './checkout.js';

const DEMO = resolve(import.meta.dirname, '../../recipes/demo');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const git = (repo: string, ...args: string[]): string => execFileSync('git', ['-C', repo, ...args], { encoding: 'utf8', env: GIT_ENV }).trim();
/** Objects stored in a repository itself (packed + loose), not borrowed through alternates. */
const ownObjects = (repo: string): number => {
  const v = Object.fromEntries(
    git(repo, 'count-objects', '-v')
      .split('\n')
      .map((l) => l.split(': ') as [string, string]),
  );
  return Number(v.count) + Number(v['in-pack']);
};

let work: string;
let repo: string;
let commits: string[]; // oldest first

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'history-'));
  repo = join(work, 'pycalc');
  execFileSync(join(DEMO, 'make-repo.sh'), [repo]);
  commits = git(repo, 'rev-list', '--reverse', 'main').split('\n');
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('shared history', () => {
  it('holds exactly the merge base history, and checkouts borrowing it carry only their own objects', async () => {
    const [c0, c1, c2, c3] = commits as [string, string, string, string];
    const store = join(work, 'history.git');
    expect(await makeSharedHistory({ path: repo }, [c3, c1, c2], store)).toBe(c1);
    expect(await hasObject(store, c1)).toBe(true);
    expect(await hasObject(store, c0)).toBe(true);
    for (const later of [c2, c3, commits.at(-1)!]) expect(await hasObject(store, later)).toBe(false);
    expect(git(store, 'for-each-ref', '--format=%(refname)')).toBe('refs/heads/history');

    const full = join(work, 'full');
    await checkoutAtCommit({ source: { path: repo }, commit: c3, target: full });
    const borrowing = join(work, 'borrowing');
    await checkoutAtCommit({ source: { path: repo }, commit: c3, target: borrowing, sharedHistory: { objects: join(store, 'objects') } });
    expect(ownObjects(borrowing)).toBeLessThan(ownObjects(full));
    expect(ownObjects(borrowing)).toBeGreaterThan(0);
    // The whole past is readable, the future is not, and the repository is consistent.
    expect(git(borrowing, 'log', '--format=%H')).toBe(git(full, 'log', '--format=%H'));
    expect(await hasObject(borrowing, commits.at(-1)!)).toBe(false);
    git(borrowing, 'fsck', '--no-dangling');
    expect(git(borrowing, 'status', '--porcelain')).toBe('');

    const atBase = join(work, 'at-base');
    await checkoutAtCommit({
      source: { path: repo },
      commit: c1,
      target: atBase,
      sharedHistory: { objects: join(store, 'objects'), objectsAtRuntime: '/opt/history/pycalc.git/objects' },
    });
    expect(await readFile(join(atBase, '.git/objects/info/alternates'), 'utf8')).toBe('/opt/history/pycalc.git/objects\n');
  });
});
