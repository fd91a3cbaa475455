/**
 * A new sandbox's git repository has a stat cache that holds before its first command: the index
 * records the ctime and inode number the sandbox sees for every file the layers hold unchanged,
 * so the first `git status` re-hashes nothing (before, it read the whole work tree: most of a
 * create-to-first-command on a real-sized repository). Changes still show: the sandbox's own,
 * and a file a higher layer replaced. A reset's fresh upper gets the same.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addHostGit, makeRepo } from '../../test/helpers/host-git-tree.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { StorePaths } from '../store/paths.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

const FILES = ['a.txt', 'b.txt', 'sub/c.txt', 'sub/deeper/d.txt'];

/** Per tracked file: [ctime seconds and inode as the index holds them, as stat gives them in the sandbox]. */
async function statCache(id: string): Promise<Record<string, [string, string]>> {
  const r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, {
    command: `git ls-files --debug; echo ==; stat -c '%n %Z %i' ${FILES.join(' ')}`,
  });
  const [debug, stats] = (r.json().stdout as string).split('==\n');
  const out: Record<string, [string, string]> = {};
  for (const block of debug!.split(/\n(?=\S)/)) {
    const path = block.split('\n')[0]!.trim();
    out[path] = [`${/ctime: (\d+):/.exec(block)![1]} ${/ino: (\d+)/.exec(block)![1]}`, ''];
  }
  for (const line of stats!.trim().split('\n')) {
    const [path, ctime, ino] = line.split(' ');
    out[path!]![1] = `${ctime} ${ino}`;
  }
  return out;
}

async function status(id: string): Promise<string> {
  return (await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'git status --porcelain' })).json().stdout as string;
}

beforeAll(async () => {
  await fx.pushBusybox(fx.reg, 'gt/base', {}, (root) => {
    addHostGit(root);
    makeRepo(join(root, 'work/repo'), Object.fromEntries(FILES.map((f) => [f, `${f}\n`])));
  });
  const base = await resolveEnv(fx.reg, 'gt/base');
  const push = new StorePaths(join(fx.work, 'push'));
  // a layer over it that replaces b.txt with other bytes of the same size
  const over = join(fx.work, 'over-layer');
  mkdirSync(join(over, 'work/repo'), { recursive: true });
  writeFileSync(join(over, 'work/repo/b.txt'), 'B.TXT\n');
  utimesSync(join(over, 'work/repo/b.txt'), 1_600_000_000, 1_600_000_000);
  await pushTree(fx.reg, push, over, { parent: base, tag: 'gt/over' });
  // and one that deletes the index (a whiteout, as an overlay upper holds it)
  const gone = join(fx.work, 'gone-layer');
  mkdirSync(join(gone, 'work/repo/.git'), { recursive: true });
  execFileSync('mknod', [join(gone, 'work/repo/.git/index'), 'c', '0', '0']);
  await pushTree(fx.reg, push, gone, { parent: base, tag: 'gt/no-index', overlayUpper: true });
}, 120_000);

describe("a new sandbox's git index", () => {
  it("holds the stat data of the laid-out files, so git trusts it; the sandbox's changes and a higher layer's still show", async () => {
    const id = await fx.create({ ref: 'gt/base', workdir: '/work/repo' });
    const first = await statCache(id);
    expect(Object.keys(first).sort()).toEqual([...FILES].sort());
    for (const f of FILES) expect([f, first[f]![0]]).toEqual([f, first[f]![1]]);
    expect(await status(id)).toBe('');
    await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'echo more >> a.txt' });
    expect(await status(id)).toBe(' M a.txt\n');

    const reset = await fx.call('POST', `/v1/sandboxes/${id}/reset`, {});
    expect(reset.status, reset.text).toBe(200);
    const again = await statCache(id);
    for (const f of FILES) expect([f, again[f]![0]]).toEqual([f, again[f]![1]]);
    expect(await status(id)).toBe('');

    const other = await fx.create({ ref: 'gt/over', workdir: '/work/repo' });
    expect(await status(other)).toBe(' M b.txt\n');
    const o = await statCache(other);
    for (const f of FILES.filter((x) => x !== 'b.txt')) expect([f, o[f]![0]]).toEqual([f, o[f]![1]]);
    for (const s of [id, other]) await fx.call('DELETE', `/v1/sandboxes/${s}`);
  });

  it('writes no index where the environment has none: no repository, or a layer deleted it', async () => {
    for (const [ref, path] of [
      ['srv/busybox', '/root'],
      ['gt/no-index', '/work/repo/.git'],
    ] as const) {
      const id = await fx.create({ ref });
      const r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: `ls -a ${path} | grep -c index; true` });
      expect([ref, r.json().stdout]).toEqual([ref, '0\n']);
      await fx.call('DELETE', `/v1/sandboxes/${id}`);
    }
    expect(fx.logLines.filter((l) => l.includes('git index'))).toEqual([]);
  });
});
