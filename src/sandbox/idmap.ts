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
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readTextOrUndefined } from '../util/fs.js';
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
 * What a success is remembered for: this boot, this launcher binary (its path names its source's
 * hash), this directory and the file system it is on. The file holds it whole; its name is a short
 * non-cryptographic hash of it (loading node:crypto would cost a one-shot run more than the probe
 * cache saves), so two identities sharing a name only cost a probe, never a wrong answer.
 */
function probeIdentity(launcher: string, dir: string): { name: string; text: string } | undefined {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const text = `${boot}\n${launcher}\n${dir}\n${statSync(dir).dev}\n`;
    return { name: fnv1a64(text), text };
  } catch {
    return undefined;
  }
}

/** FNV-1a over UTF-16 code units, as two 32-bit lanes: a file name, not a digest. */
function fnv1a64(s: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c ^ (a >>> 15), 0x5bd1e995);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

async function runProbe(host: HostInfo, dir: string): Promise<IdmapSupport> {
  mkdirSync(dir, { recursive: true });
  const id = probeIdentity(host.tools.launcher, dir);
  const cached = id === undefined ? undefined : join(PROBE_CACHE_DIR, id.name);
  if (cached !== undefined && readTextOrUndefined(cached) === id?.text) return { ok: true };
  const r = await probeNow(host, dir);
  if (r.ok && cached !== undefined) {
    // best effort: without it the next process probes again
    await mkdir(PROBE_CACHE_DIR, { recursive: true, mode: 0o700 })
      .then(() => writeFile(cached, id?.text ?? ''))
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
