/**
 * The store as an unprivileged user keeps it: `pull` lays layers out owned by the user's
 * subordinate ids (what its rootless sandboxes see as their own), `run` uses them, and `verify`
 * and `gc` read and remove trees whose files and directories that user cannot touch directly
 * (0600 files, 0500 and 0700 directories of subordinate ids); `export` gives the user a tree of its
 * own. All through the CLI, as that user.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveIdMap } from '../host/subid.js';
import { ensureTestUser } from '../../test/helpers/test-user.js';

const run = promisify(execFile);
const CLI = resolve('bin/minisandbox');
const USER = 'msbstore';
let START: number;
let work: string;
let uid: number;

async function asUser(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(
      'runuser',
      [
        '-u',
        USER,
        '--',
        'env',
        `HOME=${join(work, 'mine')}`,
        `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`,
        CLI,
        '--registry',
        join(work, 'reg'),
        '--store',
        join(work, 'store'),
        ...args,
      ],
      {
        cwd: work,
        timeout: 120_000,
      },
    );
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

beforeAll(async () => {
  // compiled by root, as bin/setup does (`minisandbox check`), so the user finds them
  ({ uid } = await ensureTestUser(USER, 400_000, { compileHelpers: true }));
  START = (await resolveIdMap({ user: { name: USER, uid } })).uidStart;
  work = await mkdtemp(join(tmpdir(), 'msb-rootless-store-'));
  chmodSync(work, 0o755);
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(tree, 'bin/busybox'));
  symlinkSync('busybox', join(tree, 'bin/sh'));
  mkdirSync(join(tree, 'private'));
  writeFileSync(join(tree, 'private/secret'), 'only root may read me\n');
  chmodSync(join(tree, 'private/secret'), 0o600);
  chmodSync(join(tree, 'private'), 0o700);
  mkdirSync(join(tree, 'sealed'));
  writeFileSync(join(tree, 'sealed/a'), 'sealed content\n');
  linkSync(join(tree, 'sealed/a'), join(tree, 'sealed/b'));
  chmodSync(join(tree, 'sealed'), 0o500);
  writeFileSync(join(tree, 'owned'), 'a user file\n');
  chownSync(join(tree, 'owned'), 1000, 1000);
  await run(CLI, ['--registry', join(work, 'reg'), 'import', tree, '--tag', 'rl/tree']);
  await run('chmod', ['-R', 'a+rX', join(work, 'reg')]);
  for (const d of ['store', 'mine']) {
    mkdirSync(join(work, d));
    chownSync(join(work, d), uid, uid);
  }
}, 600_000);

afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe('an unprivileged user', () => {
  it('checks its host, pulls, runs, exports, verifies and garbage-collects layers owned by its subordinate ids', async () => {
    // `check` sees the user's own range and the helpers root compiled
    const check = await asUser(['--json', 'check']);
    expect(check.code, check.stderr).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ user: USER, isRoot: false, idMap: { uidStart: START, gidStart: START } });

    const pulled = await asUser(['pull', 'rl/tree']);
    expect(pulled.code, pulled.stderr).toBe(0);
    const layers = readdirSync(join(work, 'store/layers')).filter((n) => !n.startsWith('.') && !n.endsWith('.lock'));
    expect(layers).toHaveLength(1);
    expect(layers[0]).toMatch(new RegExp(`\\+${START}$`));
    const layer = join(work, 'store/layers', layers[0]!);
    expect(lstatSync(join(layer, 'private/secret'))).toMatchObject({ uid: START, gid: START, mode: 0o100600 });
    expect(lstatSync(join(layer, 'private'))).toMatchObject({ uid: START, mode: 0o40700 });
    expect(lstatSync(join(layer, 'owned'))).toMatchObject({ uid: START + 1000, gid: START + 1000 });
    expect(lstatSync(join(layer, 'sealed/a')).ino).toBe(lstatSync(join(layer, 'sealed/b')).ino);

    const ran = await asUser(['run', 'rl/tree', '--', '/bin/sh', '-c', 'cat /private/secret; stat -c %u:%g /owned; id -u']);
    expect(ran.stderr).not.toMatch(/error/i);
    expect(ran.stdout).toBe(`only root may read me\n1000:1000\n0\n`);

    const ok = await asUser(['--json', 'verify']);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ ok: true, problems: [] });

    // An export is the user's own tree, as `tar -x` makes it for a user.
    const exported = await asUser(['export', 'rl/tree', join(work, 'mine', 'out')]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(lstatSync(join(work, 'mine/out/private/secret'))).toMatchObject({ uid, mode: 0o100600 });
    expect(readFileSync(join(work, 'mine/out/private/secret'), 'utf8')).toBe('only root may read me\n');
    expect(lstatSync(join(work, 'mine/out/owned')).uid).toBe(uid);

    // Corrupted behind the store's back (as root): the user's verify still reads the file and says so.
    chmodSync(join(layer, 'private'), 0o700);
    writeFileSync(join(layer, 'private/secret'), 'tampered\n');
    const bad = await asUser(['--json', 'verify']);
    expect(bad.code).toBe(1);
    const subjects = (JSON.parse(bad.stdout) as { problems: Array<{ kind: string; subject: string }> }).problems.map((p) => `${p.kind} ${p.subject}`);
    expect(subjects).toEqual(expect.arrayContaining([expect.stringMatching(/^bad-layer .*private\/secret$/)]));

    // Unreferenced in the store: gc, as the user, removes the tree and its pooled files.
    await rm(join(work, 'store/refs'), { recursive: true, force: true });
    const gc = await asUser(['--json', 'gc', '--store-only', '--grace', '0s']);
    expect(gc.code, gc.stderr).toBe(0);
    expect(readdirSync(join(work, 'store/layers')).filter((n) => !n.endsWith('.lock'))).toEqual([]);
    expect(readdirSync(join(work, 'store/links'))).toEqual([]);
  }, 600_000);
});
