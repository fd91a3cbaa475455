/**
 * Whether this host can give sandboxes idmapped lower layers: layers laid out once with their real
 * owners, mapped at mount time through each sandbox's own user namespace (as containerd and runc do
 * for user-namespaced pods). Needs root (CAP_SYS_ADMIN in the initial user namespace; the kernel
 * does not let an unprivileged user idmap), kernel >= 5.12 and a file system that supports it
 * (ext4, xfs, btrfs, tmpfs from 6.3). Probed once per process and directory, by the launcher itself
 * (native/sandbox-launch.c `idmap-probe`): the same system calls a sandbox start makes.
 *
 * A success is also remembered across processes until the next boot (in /run/minisandbox, root's):
 * the probe is a process start, a sizeable part of a one-shot `minisandbox run`. A failure is
 * probed again by every process (it comes with a warning, and may be fixed meanwhile).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { HostInfo } from './host.js';

export type IdmapSupport = { ok: true } | { ok: false; reason: string };

const probes = new Map<string, Promise<IdmapSupport>>();

/**
 * Can layers under `dir` be mounted idmapped? MINISANDBOX_IDMAP=0 says no (the shifted lay-out of
 * rootless stores, also for root: a way back should a kernel misbehave).
 */
export function probeIdmappedLayers(host: HostInfo, dir: string): Promise<IdmapSupport> {
  if (process.env.MINISANDBOX_IDMAP === '0') return Promise.resolve({ ok: false, reason: 'MINISANDBOX_IDMAP=0 is set' });
  if (!host.isRoot) return Promise.resolve({ ok: false, reason: 'idmapped mounts need root (the kernel does not let an unprivileged user idmap)' });
  const key = `${host.tools.launcher}\0${dir}`;
  let p = probes.get(key);
  if (p === undefined) {
    p = runProbe(host, dir);
    probes.set(key, p);
  }
  return p;
}

/** Where successes are remembered (beside idpool.ts's slots). */
const PROBE_CACHE_DIR = '/run/minisandbox/idmap-probes';

/**
 * The name a success is remembered under: this boot, this launcher binary (its path names its
 * source's hash), this directory and the file system it is on.
 */
function probeKey(launcher: string, dir: string): string | undefined {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const dev = statSync(dir).dev;
    return createHash('sha256').update(`${boot}\0${launcher}\0${dir}\0${dev}`).digest('hex').slice(0, 32);
  } catch {
    return undefined;
  }
}

async function runProbe(host: HostInfo, dir: string): Promise<IdmapSupport> {
  await mkdir(dir, { recursive: true });
  const key = probeKey(host.tools.launcher, dir);
  const cached = key === undefined ? undefined : join(PROBE_CACHE_DIR, key);
  if (cached !== undefined && statSync(cached, { throwIfNoEntry: false }) !== undefined) return { ok: true };
  const r = await probeNow(host, dir);
  if (r.ok && cached !== undefined) {
    // best effort: without it the next process probes again
    await mkdir(PROBE_CACHE_DIR, { recursive: true, mode: 0o700 })
      .then(() => writeFile(cached, `${dir}\n`))
      .catch(() => undefined);
  }
  return r;
}

function probeNow(host: HostInfo, dir: string): Promise<IdmapSupport> {
  const { uidStart, gidStart, count } = host.idMap;
  const args = ['idmap-probe', '--uid-map', `${uidStart}:${count}`, '--gid-map', `${gidStart}:${count}`, '--', dir];
  return new Promise((resolve) => {
    execFile(host.tools.launcher, args, { timeout: 10_000 }, (err, stdout, stderr) => {
      if (err === null) resolve({ ok: true });
      else resolve({ ok: false, reason: `${stdout}${stderr}`.trim() || String(err) });
    });
  });
}

/** For tests: forget what was probed. */
export function forgetIdmapProbes(): void {
  probes.clear();
}
