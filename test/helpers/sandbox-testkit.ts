/**
 * Shared fixtures for the sandbox tests and benchmark: shifted rootfs trees cached under
 * `.cache/sandbox/` (the Debian rootfs under SHARED_FIXTURES_DIR, for every checkout), fresh state
 * dirs, and a "nothing left behind" probe. Not used by the runtime.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, readlink, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { probeHost, type HostInfo } from '../../src/sandbox/host.js';
import { ensureDebianRootfs, makeBusyboxRootfs, shiftCopyTree } from '../../src/sandbox/rootfs.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import type { IdMap } from '../../src/host/subid.js';

export const run = promisify(execFile);
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const CACHE_DIR = join(REPO_ROOT, '.cache', 'sandbox');

export async function busyboxLower(idMap: IdMap, name = 'busybox'): Promise<string> {
  const dst = join(CACHE_DIR, `${name}-shifted-${idMap.uidStart}`);
  try {
    await stat(join(dst, '.msb-shifted'));
    return dst;
  } catch {
    // build below
  }
  const src = await mkdtemp(join(tmpdir(), 'msb-bb-'));
  await makeBusyboxRootfs(src);
  try {
    return await shiftCopyTree(src, dst, idMap);
  } finally {
    await rm(src, { recursive: true, force: true });
  }
}

/**
 * Where fixtures that depend only on their inputs live, shared by every test file, run and
 * checkout of this host: a Debian rootfs costs a debootstrap (about 35 s and 340 MB, twice with its
 * shifted copy), which each checkout's .cache (and each CI run's fresh one) used to pay again.
 * Names carry every input; trees are made under a temporary name and renamed, so racing test
 * files and checkouts are harmless. MINISANDBOX_TEST_FIXTURES overrides the place.
 */
export const SHARED_FIXTURES_DIR = process.env.MINISANDBOX_TEST_FIXTURES ?? '/var/tmp/minisandbox-test-fixtures';

export async function debianLower(idMap: IdMap): Promise<string> {
  // the shifted copy must be reachable by the sandbox's subordinate ids: the dir is searchable by all
  await mkdir(SHARED_FIXTURES_DIR, { recursive: true, mode: 0o755 });
  const src = await ensureDebianRootfs(SHARED_FIXTURES_DIR);
  return shiftCopyTree(src, `${src}-shifted-${idMap.uidStart}-${idMap.gidStart}`, idMap);
}

export async function freshStateDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'msb-state-'));
  await run('chmod', ['0711', d]);
  return d;
}

export async function hostInfo(): Promise<HostInfo> {
  return probeHost();
}

/** Namespace identities of a live sandbox, to look for leftovers after it is gone. */
export async function sandboxFootprint(sb: Sandbox): Promise<{ pidNs: string; mntNs: string; userNs: string; dir: string; cgroups: string[]; pids: number[] }> {
  return {
    userNs: await readlink(`/proc/${sb.state.holderPid}/ns/user`),
    pidNs: await readlink(`/proc/${sb.state.initPid}/ns/pid`),
    mntNs: await readlink(`/proc/${sb.state.holderPid}/ns/mnt`),
    dir: dirname(sb.state.upperDir),
    cgroups: sb.state.cgroupDirs,
    pids: [sb.state.holderPid, sb.state.initPid],
  };
}

/** What of a destroyed sandbox is still on the host (empty when nothing). */
export async function leftovers(fp: Awaited<ReturnType<typeof sandboxFootprint>>): Promise<string[]> {
  const found: string[] = [];
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const pidNs = await readlink(`/proc/${p}/ns/pid`).catch(() => '');
    const mntNs = await readlink(`/proc/${p}/ns/mnt`).catch(() => '');
    const stat = await readFile(`/proc/${p}/stat`, 'utf8').catch(() => '');
    // A zombie reparented to the host's init holds nothing but a pid until init reaps it.
    if (/\) Z 1 /.test(stat)) continue;
    // Namespace inode numbers are recycled once a namespace dies: a sandbox created meanwhile by
    // another test may reuse one, but not both its user and its pid or mount namespace numbers.
    const userNs = await readlink(`/proc/${p}/ns/user`).catch(() => '');
    if ((pidNs === fp.pidNs || mntNs === fp.mntNs) && userNs === fp.userNs) {
      const cmd = await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '');
      found.push(`process ${p}: ${cmd.replaceAll('\0', ' ').slice(0, 120)} ${stat.slice(0, 60)}`);
    }
  }
  for (const d of [fp.dir, ...fp.cgroups]) {
    if (
      await stat(d).then(
        () => true,
        () => false,
      )
    )
      found.push(`path ${d}`);
  }
  const mounts = await run('cat', ['/proc/self/mountinfo']);
  if (mounts.stdout.includes(fp.dir)) found.push('mount under the sandbox dir');
  return found;
}
