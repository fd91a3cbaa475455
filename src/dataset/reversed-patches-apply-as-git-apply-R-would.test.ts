/**
 * SWE-smith's rows carry the patch that made the bug; the gold patch is that patch applied in
 * reverse. reversePatch must give what `git apply -R` applies, for every kind of change git
 * writes: checked with real git on a real repository, both ways round.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { reversePatch } from './reverse-patch.js';

const run = promisify(execFile);
const env = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' };
let repo: string;
const git = async (...args: string[]): Promise<string> => (await run('git', ['-C', repo, ...args], { env })).stdout;
const commit = async (msg: string): Promise<string> => {
  await git('add', '-A');
  await git('-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-q', '-m', msg);
  return (await git('rev-parse', 'HEAD')).trim();
};

let before: string;
let after: string;
let patch: string;

beforeAll(async () => {
  repo = await mkdtemp(join(tmpdir(), 'rev-'));
  await git('init', '-q', '-b', 'main');
  const lines = Array.from({ length: 40 }, (_, i) => `line ${i}`);
  await writeFile(join(repo, 'edit.txt'), `${lines.join('\n')}\n`);
  await writeFile(join(repo, 'gone.txt'), 'deleted later\n');
  await writeFile(join(repo, 'moved.txt'), `${lines.slice(0, 20).join('\n')}\n`);
  await writeFile(join(repo, 'no newline.txt'), 'last line without newline');
  await writeFile(join(repo, 'tool.sh'), '#!/bin/sh\necho hi\n');
  before = await commit('before');
  // every kind of change a bug patch makes: edits in two hunks (one where lines are only
  // removed, one only added, one replaced), a new and a deleted file, a rename with an edit, a
  // mode change, a file losing its last newline and one gaining it
  const edited = [...lines];
  edited.splice(3, 2, '--- looks like a header', '+++ so does this');
  edited.splice(30, 0, 'added 1', 'added 2');
  edited.splice(15, 1);
  await writeFile(join(repo, 'edit.txt'), `${edited.join('\n')}`);
  await writeFile(join(repo, 'new.txt'), 'a new file\n');
  await rm(join(repo, 'gone.txt'));
  await rm(join(repo, 'moved.txt'));
  await writeFile(join(repo, 'renamed.txt'), `${[...lines.slice(0, 19), 'changed while moved'].join('\n')}\n`);
  await writeFile(join(repo, 'no newline.txt'), 'last line with a newline now\n');
  await chmod(join(repo, 'tool.sh'), 0o755);
  after = await commit('after');
  patch = await git('diff', '-M', before, after);
});
afterAll(async () => {
  await rm(repo, { recursive: true, force: true });
});

/** The tree `patch` makes of a checkout at `commit`. */
async function applied(commit: string, p: string): Promise<string> {
  await git('checkout', '-q', '-f', commit);
  const f = join(repo, '..', `${repo.split('/').at(-1)}.patch`);
  await writeFile(f, p);
  await git('apply', '--index', f);
  return (await git('write-tree')).trim();
}

const treeOf = async (commit: string): Promise<string> => (await git('rev-parse', `${commit}^{tree}`)).trim();

describe('reversePatch', () => {
  it('turns the bug patch into one that git applies to the buggy tree, giving back the tree before', async () => {
    expect(patch).toContain('rename from moved.txt');
    expect(patch).toContain('\\ No newline at end of file');
    const gold = reversePatch(patch);
    expect(await applied(after, gold)).toBe(await treeOf(before));
    // and what git would turn it into itself: the reversed patch applied forwards is the patch applied with -R
    await git('checkout', '-q', '-f', after);
    const f = join(repo, '..', 'fwd.patch');
    await writeFile(f, patch);
    await git('apply', '-R', '--index', f);
    expect((await git('write-tree')).trim()).toBe(await treeOf(before));
  });

  it('turned around twice is the patch itself', () => {
    expect(reversePatch(reversePatch(patch))).toBe(patch);
  });

  it('names what it cannot reverse instead of writing a patch that would apply wrongly', () => {
    const binary = 'diff --git a/x.png b/x.png\nindex 1..2 100644\nGIT binary patch\nliteral 3\nabc\n';
    expect(() => reversePatch(binary, 'row 3')).toThrow(InvalidInputError);
    expect(() => reversePatch(binary, 'row 3')).toThrow('row 3: cannot reverse a binary patch');
    const copy = 'diff --git a/a b/b\nsimilarity index 100%\ncopy from a\ncopy to b\n';
    expect(() => reversePatch(copy)).toThrow('copies a file');
    const cut = 'diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,3 +1,3 @@\n x\n-y\n';
    expect(() => reversePatch(cut)).toThrow('is cut short');
  });
});
