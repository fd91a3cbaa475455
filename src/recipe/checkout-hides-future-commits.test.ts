import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { NotFoundError } from '../errors.js';
import { checkoutAtCommit, hasObject, reachableCommits } from './checkout.js';

const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 't',
  GIT_AUTHOR_EMAIL: 't@example.com',
  GIT_COMMITTER_NAME: 't',
  GIT_COMMITTER_EMAIL: 't@example.com',
};
const git = (cwd: string, ...args: string[]): string => execFileSync('git', args, { cwd, env: GIT_ENV, encoding: 'utf8' }).trim();

/** A repo with a past, the base commit, a future fix on main, a tag and a side branch from the future. */
async function makeRepo(): Promise<{ dir: string; base: string; future: string; side: string; futureBlob: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'src-repo-'));
  git(dir, 'init', '-q', '-b', 'main');
  await writeFile(join(dir, 'lib.py'), 'def f():\n    return 1\n');
  git(dir, 'add', '.');
  git(dir, 'commit', '-qm', 'past');
  await writeFile(join(dir, 'lib.py'), 'def f():\n    return 2  # bug\n');
  git(dir, 'commit', '-qam', 'base');
  const base = git(dir, 'rev-parse', 'HEAD');
  await writeFile(join(dir, 'lib.py'), 'def f():\n    return 1  # the fix\n');
  git(dir, 'commit', '-qam', 'fix');
  const future = git(dir, 'rev-parse', 'HEAD');
  const futureBlob = git(dir, 'rev-parse', 'HEAD:lib.py');
  git(dir, 'tag', 'v1');
  git(dir, 'checkout', '-qb', 'side');
  await writeFile(join(dir, 'side.txt'), 'x\n');
  git(dir, 'add', '.');
  git(dir, 'commit', '-qm', 'side');
  const side = git(dir, 'rev-parse', 'HEAD');
  git(dir, 'checkout', '-q', 'main');
  return { dir, base, future, side, futureBlob };
}

describe('checkoutAtCommit', () => {
  it('leaves only the commit and its ancestry: future commits, tags, branches and remotes are gone', async () => {
    const r = await makeRepo();
    const target = join(await mkdtemp(join(tmpdir(), 'co-')), 'testbed');
    await checkoutAtCommit({ source: { path: r.dir }, commit: r.base, target });

    expect(await readFile(join(target, 'lib.py'), 'utf8')).toContain('# bug');
    expect(git(target, 'rev-parse', 'HEAD')).toBe(r.base);
    expect(git(target, 'status', '--porcelain')).toBe('');
    expect((await reachableCommits(target)).sort()).toEqual([r.base, git(r.dir, 'rev-parse', `${r.base}~1`)].sort());
    for (const oid of [r.future, r.side, r.futureBlob]) expect(await hasObject(target, oid)).toBe(false);
    expect(git(target, 'remote')).toBe('');
    expect(git(target, 'tag')).toBe('');
    expect(git(target, 'for-each-ref', '--format=%(refname)')).toBe('refs/heads/main');
    expect(await readdir(join(target, '.git'))).not.toContain('logs');
  });

  it('works from a bare mirror and reports a missing commit as not found', async () => {
    const r = await makeRepo();
    const mirror = join(await mkdtemp(join(tmpdir(), 'mirror-')), 'repo.git');
    git(tmpdir(), 'clone', '-q', '--mirror', r.dir, mirror);
    const target = join(await mkdtemp(join(tmpdir(), 'co-')), 'testbed');
    await checkoutAtCommit({ source: { mirror }, commit: r.base, target });
    expect(await hasObject(target, r.future)).toBe(false);

    const t2 = join(await mkdtemp(join(tmpdir(), 'co-')), 'testbed');
    const missing = 'deadbeef'.repeat(5);
    const err = await checkoutAtCommit({ source: { mirror }, commit: missing, target: t2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as Error).message).toContain(missing);
  });
});
