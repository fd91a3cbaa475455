/**
 * Issue 14: a layer holding a setuid-root file and a 0666 `1:11` (kmsg) node. After pull, run,
 * export and build, another host user reaches neither: the store is private (it cannot traverse
 * the store), the export is stripped of setuid bits and device nodes, and inside a sandbox the
 * layer's node is no usable device. The same for an unprivileged user's own store. A store made
 * by the code before this rule is made private in place.
 *
 * Issue 25: nor does a host process running as the sandboxes' root uid (the first subordinate uid,
 * root inside every sandbox over shifted layers): it can neither exec the layer's setuid-root file
 * nor read a layer file, while sandboxes still run over idmapped and over shifted layers, and
 * rootless. Only the sandboxes' own mount namespaces reach layer files as that uid.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, lstatSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTestUser } from '../../test/helpers/test-user.js';
import { resolveIdMap } from '../host/subid.js';
import { FsmetaStream } from './fsmeta.js';

const run = promisify(execFile);
const REPO = resolve(import.meta.dirname, '..', '..');
const CLI = join(REPO, 'bin/minisandbox');
/** The store's owner in the rootless half. */
const OWNER = 'msbpriv';
/** The other host user, who must reach nothing. */
const OTHER = 'nobody';
/** Root's first subordinate uid (bin/setup's root:1000000:...): root of root's sandboxes over shifted layers. */
let SANDBOX_ROOT_UID: number;
/** The owner's first subordinate uid: root of its rootless sandboxes. */
let OWNER_SANDBOX_ROOT_UID: number;
/** The last commit before the store became private: its stores are what an upgrade meets. */
const BEFORE_PRIVATE = '79cb3b7';
/** Writes to the layer's kmsg node if it is a device (root's lay-out keeps it; a rootless one cannot make it). */
const PROBE = 'if [ -c /kmsg ]; then echo probe > /kmsg && echo WROTE; else echo NO-DEVICE; fi; echo ok > /dev/null && echo DEVNULL';
let work: string;
let ownerUid: number;

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

async function exec(cmd: string, args: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): Promise<Ran> {
  try {
    const env = opts.env === undefined ? undefined : { ...process.env, ...opts.env };
    const r = await run(cmd, args, { cwd: opts.cwd ?? work, timeout: 240_000, maxBuffer: 64 << 20, ...(env === undefined ? {} : { env }) });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

function cli(store: string, args: string[], as?: string, env?: Record<string, string>): Promise<Ran> {
  const argv = [CLI, '--registry', join(work, 'reg'), '--store', store, ...args];
  if (as === undefined) return exec(argv[0]!, argv.slice(1), env === undefined ? {} : { env });
  return exec('runuser', ['-u', as, '--', 'env', `HOME=${join(work, 'home')}`, `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`, ...argv]);
}

/** Every path of the store that holds the layer's setuid file or its device node (found as its owner). */
async function dangerousPaths(store: string): Promise<string[]> {
  const r = await exec('find', [store, '(', '-perm', '-4000', '-o', '-type', 'c', ')', '-print']);
  return r.stdout.split('\n').filter((l) => l !== '' && !l.includes('/sandboxes/'));
}

/** What the other user gets for each path: it must be kept out of every one. */
async function reachedByOther(paths: string[]): Promise<string[]> {
  const reached: string[] = [];
  for (const p of paths) {
    const r = await exec('runuser', ['-u', OTHER, '--', 'stat', '-c', '%a', p]);
    if (r.code === 0) reached.push(p);
    else expect(r.stderr).toMatch(/Permission denied/);
  }
  return reached;
}

/** The ACL stores were made private with before issue 25: owner rwx, `uid` --x, mask --x (linux/posix_acl_xattr.h). */
function searchAclOfIssue14(uid: number): Buffer {
  const entries: Array<[tag: number, perm: number, id: number]> = [
    [0x01, 7, 0xffffffff],
    [0x02, 1, uid],
    [0x04, 0, 0xffffffff],
    [0x10, 1, 0xffffffff],
    [0x20, 0, 0xffffffff],
  ];
  const b = Buffer.alloc(4 + 8 * entries.length);
  b.writeUInt32LE(2, 0);
  entries.forEach(([tag, perm, id], i) => {
    b.writeUInt16LE(tag, 4 + 8 * i);
    b.writeUInt16LE(perm, 6 + 8 * i);
    b.writeUInt32LE(id, 8 + 8 * i);
  });
  return b;
}

/**
 * A host process of `uid` (no account: a subordinate id) running `argv`: a shell of that uid execs
 * it, as an attacker's process would (setpriv's own exec of a path it was given reaches further).
 */
function asUid(uid: number, argv: string[]): Promise<Ran> {
  return exec('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', '/bin/sh', '-c', 'exec "$@"', 'sh', ...argv]);
}

/**
 * What a host process of the sandboxes' root uid reaches in `store`: the setuid files it could run
 * (with the euid they gave it) and the layer files and nodes it could reach. Both must be empty.
 */
async function reachedBySandboxUid(store: string, uid: number): Promise<{ ran: string[]; read: string[] }> {
  const found = await dangerousPaths(store);
  const ran: string[] = [];
  for (const p of found.filter((f) => f.endsWith('/bin/rootid'))) {
    // coreutils' id, setuid root: it prints the euid the setuid bit gave (busybox drops it)
    const r = await asUid(uid, [p, '-u']);
    if (r.code === 0) ran.push(`${p} -> euid ${r.stdout.trim()}`);
    else expect(r.stderr).toMatch(/Permission denied/);
  }
  const read: string[] = [];
  const files = [...found, ...found.filter((f) => f.endsWith('/bin/rootsh')).map((f) => join(f, '..', 'busybox'))];
  for (const p of files) {
    const r = await asUid(uid, ['/bin/busybox', 'stat', '-c', '%a', p]);
    if (r.code === 0) read.push(p);
  }
  expect((await asUid(uid, ['/bin/ls', store])).code).not.toBe(0);
  return { ran, read };
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('this test makes device nodes and users as root');
  // helpers compiled by root, as bin/setup does, so the unprivileged user finds them
  ({ uid: ownerUid } = await ensureTestUser(OWNER, 500_000, { compileHelpers: true }));
  SANDBOX_ROOT_UID = (await resolveIdMap()).uidStart;
  OWNER_SANDBOX_ROOT_UID = (await resolveIdMap({ user: { name: OWNER, uid: ownerUid } })).uidStart;
  work = await mkdtemp(join(tmpdir(), 'msb-private-'));
  chmodSync(work, 0o755);
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(tree, 'bin/busybox'));
  symlinkSync('busybox', join(tree, 'bin/sh'));
  copyFileSync('/bin/busybox', join(tree, 'bin/rootsh'));
  chmodSync(join(tree, 'bin/rootsh'), 0o4755);
  copyFileSync('/usr/bin/id', join(tree, 'bin/rootid'));
  chmodSync(join(tree, 'bin/rootid'), 0o4755);
  copyFileSync('/bin/busybox', join(tree, 'bin/groupsh'));
  chmodSync(join(tree, 'bin/groupsh'), 0o2755);
  await run('mknod', ['-m', '0666', join(tree, 'kmsg'), 'c', '1', '11']);
  const imported = await cli(join(work, 'root-store'), ['import', tree, '--tag', 'priv/tree']);
  expect(imported.code, imported.stderr).toBe(0);
  await run('chmod', ['-R', 'a+rX', join(work, 'reg')]);
  mkdirSync(join(work, 'home'));
  chownSync(join(work, 'home'), ownerUid, ownerUid);
}, 240_000);

afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe("a layer's setuid files and device nodes", () => {
  it("are out of other users reach in root's store after pull, run, export and build, and the export has none", async () => {
    const store = join(work, 'root-store');
    expect((await cli(store, ['pull', 'priv/tree'])).code).toBe(0);
    // the layer's kmsg node is no device inside a sandbox (layers are nodev); the runtime's own /dev works
    const ran = await cli(store, ['run', 'priv/tree', '--', '/bin/sh', '-c', PROBE]);
    expect(ran.stdout).not.toContain('WROTE');
    expect(ran.stdout).toContain('DEVNULL');
    expect(ran.stderr).toMatch(/kmsg: (Permission denied|Operation not permitted)/);
    const out = join(work, 'export-root');
    const exported = await cli(store, ['export', 'priv/tree', out]);
    expect(exported.code, exported.stderr).toBe(0);
    const recipe = join(work, 'env.yaml');
    writeFileSync(recipe, 'kind: env\nname: priv-env\nparent: {ref: priv/tree}\nnetwork: false\ncommands:\n  - echo built > /built\n');
    const built = await cli(store, ['build', recipe, '--tag', 'priv/built']);
    expect(built.code, built.stderr).toBe(0);

    // export: a tree for the user who asked, without setuid/setgid bits or device nodes
    expect(lstatSync(join(out, 'bin/rootsh')).mode & 0o7777).toBe(0o755);
    expect(lstatSync(join(out, 'bin/groupsh')).mode & 0o7777).toBe(0o755);
    expect(readdirSync(out)).not.toContain('kmsg');

    // root may ask for them, and then gets a directory no one else enters
    const special = join(work, 'export-special');
    const kept = await cli(store, ['export', '--preserve-special', 'priv/tree', special]);
    expect(kept.code, kept.stderr).toBe(0);
    expect(lstatSync(special).mode & 0o777).toBe(0o700);
    expect(lstatSync(join(special, 'bin/rootsh')).mode & 0o7777).toBe(0o4755);
    expect(lstatSync(join(special, 'kmsg')).isCharacterDevice()).toBe(true);

    const found = await dangerousPaths(store);
    // the layer's one real-owner lay-out (sandboxes mount it idmapped; export and build read it),
    // and a shifted one where the host cannot idmap, hold them (pool files are named by digest)
    expect(found.filter((p) => p.endsWith('/kmsg')).length).toBeGreaterThanOrEqual(1);
    expect(found.filter((p) => p.endsWith('/bin/rootsh')).length).toBeGreaterThanOrEqual(1);
    expect(await reachedByOther(found)).toEqual([]);
    expect((await exec('runuser', ['-u', OTHER, '--', 'ls', store])).code).not.toBe(0);

    // sandboxes over shifted layers (hosts without idmapped mounts) run as the first subordinate
    // uid, with no right to the store above their own dir ...
    const shifted = await cli(store, ['run', 'priv/tree', '--', '/bin/sh', '-c', 'id -u; echo shifted'], undefined, { MINISANDBOX_IDMAP: '0' });
    expect(shifted.stdout, shifted.stderr).toBe('0\nshifted\n');
    // ... and a host process of that uid reaches no layer file, the shifted lay-out's included
    expect((await dangerousPaths(store)).some((p) => /\+\d+\/bin\/rootid$/.test(p))).toBe(true);
    expect(await reachedBySandboxUid(store, SANDBOX_ROOT_UID)).toEqual({ ran: [], read: [] });
  }, 300_000);

  it("are out of other users reach in an unprivileged user's own store, which its first command makes private", async () => {
    // does not exist yet: its first mkdir makes it private
    const store = join(work, 'home', 'store');
    const pulled = await cli(store, ['pull', 'priv/tree'], OWNER);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(lstatSync(store)).toMatchObject({ uid: ownerUid });
    expect(lstatSync(store).mode & 0o007).toBe(0);
    const ran = await cli(store, ['run', 'priv/tree', '--', '/bin/sh', '-c', PROBE], OWNER);
    expect(ran.stdout).not.toContain('WROTE');
    expect(ran.stdout).toBe('NO-DEVICE\nDEVNULL\n');
    const out = join(work, 'home', 'export-user');
    const exported = await cli(store, ['export', 'priv/tree', out], OWNER);
    expect(exported.code, exported.stderr).toBe(0);
    expect(lstatSync(join(out, 'bin/rootsh')).mode & 0o7777).toBe(0o755);
    expect(readdirSync(out)).not.toContain('kmsg');
    const refused = await cli(store, ['export', '--preserve-special', 'priv/tree', join(work, 'home', 'special')], OWNER);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--preserve-special needs root/);

    const found = await dangerousPaths(store);
    expect(found.some((p) => p.endsWith('/bin/rootsh'))).toBe(true);
    expect(await reachedByOther(found)).toEqual([]);
    // the owner's sandboxes' root uid (its first subordinate uid) reaches none of its layers either
    expect(await reachedBySandboxUid(store, OWNER_SANDBOX_ROOT_UID)).toEqual({ ran: [], read: [] });
  }, 300_000);

  it('are taken out of reach in a store made before the store became private, on its next command', async () => {
    // that code's CLI, with our node_modules and compiled helpers (named by their sources' hash)
    const old = join(work, 'old');
    mkdirSync(old);
    await run('sh', ['-c', `git -C ${REPO} archive ${BEFORE_PRIVATE} | tar -x -C ${old}`]);
    symlinkSync(join(REPO, 'node_modules'), join(old, 'node_modules'));
    mkdirSync(join(old, 'native', 'build'), { recursive: true });
    for (const f of readdirSync(join(REPO, 'native', 'build'))) symlinkSync(join(REPO, 'native', 'build', f), join(old, 'native', 'build', f));
    const store = join(work, 'old-store');
    const tsx = join(REPO, 'node_modules/.bin/tsx');
    const oldPull = await exec(tsx, [join(old, 'src/cli/main.ts'), '--registry', join(work, 'reg'), '--store', store, 'pull', 'priv/tree', '--id-shift', '0']);
    expect(oldPull.code, oldPull.stderr).toBe(0);
    const before = await dangerousPaths(store);
    // what the issue found: today's store lets every user at the setuid file and the node
    expect((await reachedByOther(before)).length).toBeGreaterThan(0);

    // someone else's open store is refused, not used (nor fixed: it is not theirs)
    const refused = await cli(store, ['verify', '--no-store'], OWNER);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/belongs to uid 0 and is open to others/);
    expect(refused.stderr).toMatch(/hint: /);

    const verified = await cli(store, ['verify']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    expect(verified.stderr).toMatch(/made it private/);
    expect(await reachedByOther(await dangerousPaths(store))).toEqual([]);
    expect((await exec('runuser', ['-u', OTHER, '--', 'ls', store])).code).not.toBe(0);
    // and sandboxes still run from it
    const ran = await cli(store, ['run', 'priv/tree', '--', '/bin/sh', '-c', 'echo inside']);
    expect(ran.stdout, ran.stderr).toBe('inside\n');

    // as the code before issue 25 made stores private: 0710, the mask of an ACL that lets the
    // sandboxes' root uid search the root
    chmodSync(store, 0o710);
    const helper = await FsmetaStream.start(store);
    helper.setxattr(store, 'system.posix_acl_access', searchAclOfIssue14(SANDBOX_ROOT_UID));
    await helper.close();
    expect((await asUid(SANDBOX_ROOT_UID, ['/bin/busybox', 'stat', join(store, 'layers')])).code).toBe(0);
    const upgraded = await cli(store, ['verify']);
    expect(upgraded.code, upgraded.stdout + upgraded.stderr).toBe(0);
    expect(lstatSync(store).mode & 0o7777).toBe(0o700);
    expect(await reachedBySandboxUid(store, SANDBOX_ROOT_UID)).toEqual({ ran: [], read: [] });
    // the ACL itself is gone, not only masked: group bits given back let that uid in no more
    chmodSync(store, 0o710);
    expect((await asUid(SANDBOX_ROOT_UID, ['/bin/busybox', 'stat', join(store, 'layers')])).code).not.toBe(0);
    chmodSync(store, 0o700);
    const again = await cli(store, ['run', 'priv/tree', '--', '/bin/sh', '-c', 'echo inside']);
    expect(again.stdout, again.stderr).toBe('inside\n');
  }, 300_000);
});
