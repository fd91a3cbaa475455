/**
 * Per-sandbox id ranges. Over idmapped layers (see idmap.ts) a root-run sandbox need not share the
 * range its layers were shifted to, so each gets a 65,536-id range of its own, carved out of root's
 * subordinate allocation (/etc/subuid, /etc/subgid; `bin/setup` writes `root:1000000:1000000000`):
 * two sandboxes alive at once never share a host uid, so neither can signal, ptrace or write the
 * files of the other, and per-uid limits (RLIMIT_NPROC on old kernels) are per sandbox.
 *
 * Slot i covers subordinate start + i * 65536 .. + 65535. Slot 0 is never handed out: it is the
 * range shared by sandboxes over shifted layers (rootless stores, hosts without idmapped mounts),
 * whose layer files it owns.
 *
 * A slot is taken by creating `<dir>/<i>` with link(2) (atomic, fails if it exists, and the file
 * is complete the moment it appears), holding who owns it: the runtime process and, once started,
 * the sandbox's holder. It is released when the sandbox is destroyed, and reaped once both are
 * dead (a crashed runtime). The directory is host-wide, since host uids are: by default under /run,
 * a tmpfs emptied at boot, when every sandbox is gone too.
 */
import { linkSync, mkdirSync, readdirSync, readFileSync, renameSync, rmdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { MinisandboxError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { randomBelow, randomHex } from '../util/lazy-crypto.js';
import { processStartTime, sameProcessAlive } from './proc.js';
import { DEFAULT_ID_COUNT, type IdMap, parseSubidFile, SUBGID_FILE, SUBUID_FILE } from '../host/subid.js';

/** Where slots are taken (override: MINISANDBOX_IDRANGE_DIR, e.g. for a test's own pool). */
export function idRangeDir(): string {
  return process.env.MINISANDBOX_IDRANGE_DIR ?? '/run/minisandbox/idranges';
}

export interface IdPool {
  uidStart: number;
  gidStart: number;
  /** Ids per sandbox. */
  count: number;
  /** Slots 1..slots may be handed out. */
  slots: number;
}

const SlotSchema = z.strictObject({
  sandboxId: z.string(),
  ownerPid: z.number().int().positive(),
  ownerStartTime: z.string().optional(),
  holderPid: z.number().int().positive().optional(),
  holderStartTime: z.string().optional(),
});
type Slot = z.infer<typeof SlotSchema>;

export interface IdRangeLease {
  slot: number;
  /** The slot file; released by releaseIdRange. */
  path: string;
  idMap: IdMap;
}

/**
 * Root's pool, from its subordinate ranges; undefined when they hold fewer than two sandboxes'
 * worth (slot 0 plus one), so that every sandbox must share slot 0.
 */
export function resolveIdPool(opts: { subuidFile?: string; subgidFile?: string; count?: number } = {}): IdPool | undefined {
  const count = opts.count ?? DEFAULT_ID_COUNT;
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  };
  // The first of root's ranges, as resolveIdMap picks it: slot 0 is then the shared range.
  const first = (f: string) => parseSubidFile(read(f)).find((e) => (e.owner === 'root' || e.owner === '0') && e.count >= count);
  const u = first(opts.subuidFile ?? SUBUID_FILE);
  const g = first(opts.subgidFile ?? SUBGID_FILE);
  if (u === undefined || g === undefined) return undefined;
  const slots = Math.floor(Math.min(u.count, g.count) / count) - 1;
  return slots >= 1 ? { uidStart: u.start, gidStart: g.start, count, slots } : undefined;
}

export function slotIdMap(pool: IdPool, slot: number): IdMap {
  return { uidStart: pool.uidStart + slot * pool.count, gidStart: pool.gidStart + slot * pool.count, count: pool.count };
}

/** Random picks before a pass that reaps slots of dead sandboxes and then tries every free one. */
const PICKS = 64;

/**
 * Takes a free slot for `sandboxId` (owned by this process). Synchronous: a handful of system
 * calls on a sandbox's start path. Random picks keep racing starters from colliding on one slot.
 */
export function allocateIdRange(pool: IdPool, sandboxId: string, dir = idRangeDir()): IdRangeLease {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.new-${process.pid}-${randomHex(6)}`);
  const slot: Slot = { sandboxId, ownerPid: process.pid, ownerStartTime: processStartTime(process.pid) };
  writeFileSync(tmp, JSON.stringify(slot), { mode: 0o600 });
  const take = (n: number): IdRangeLease | undefined => {
    const path = join(dir, String(n));
    try {
      linkSync(tmp, path);
      return { slot: n, path, idMap: slotIdMap(pool, n) };
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) throw e;
      return undefined;
    }
  };
  try {
    for (let i = 0; i < PICKS; i++) {
      const got = take(1 + randomBelow(pool.slots));
      if (got !== undefined) return got;
    }
    // Mostly taken (or by dead sandboxes): reap, then try every slot the directory lacks.
    reapStaleIdRanges(dir);
    const taken = new Set(liveIdRanges(dir));
    for (let n = 1; n <= pool.slots; n++) {
      if (taken.has(n)) continue;
      const got = take(n);
      if (got !== undefined) return got;
    }
  } finally {
    unlinkSync(tmp);
  }
  throw new MinisandboxError(
    'ID_RANGES_EXHAUSTED',
    `no free id range for sandbox ${sandboxId}: all ${pool.slots} ranges of ${pool.count} ids are in use by live sandboxes (see ${dir})`,
    {
      hint: 'destroy sandboxes that are no longer needed, or give root a larger subordinate range in /etc/subuid and /etc/subgid',
    },
  );
}

/** Records the sandbox's holder in its slot, so that the slot stays taken while the holder lives. */
export function recordIdRangeHolder(lease: { path: string }, sandboxId: string, holderPid: number, holderStartTime: string | undefined): void {
  const slot: Slot = {
    sandboxId,
    ownerPid: process.pid,
    ownerStartTime: processStartTime(process.pid),
    holderPid,
    ...(holderStartTime === undefined ? {} : { holderStartTime }),
  };
  const tmp = `${lease.path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(slot), { mode: 0o600 });
  // A rename over our own slot: no one else writes it while we (its owner) live.
  renameSync(tmp, lease.path);
}

/** Gives the slot back, if it is still this sandbox's (a reaper may have taken it from a dead owner). */
export function releaseIdRange(path: string, sandboxId: string): void {
  const s = readSlot(path);
  if (s === 'missing' || (s !== 'unreadable' && s.sandboxId !== sandboxId)) return;
  try {
    unlinkSync(path);
  } catch (e) {
    if (!isErrno(e, 'ENOENT')) throw e;
  }
}

function readSlot(path: string): Slot | 'missing' | 'unreadable' {
  try {
    const parsed = SlotSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
    return parsed.success ? parsed.data : 'unreadable';
  } catch (e) {
    return isErrno(e, 'ENOENT') ? 'missing' : 'unreadable';
  }
}

function slotLive(s: Slot): boolean {
  return sameProcessAlive(s.ownerPid, s.ownerStartTime) || (s.holderPid !== undefined && sameProcessAlive(s.holderPid, s.holderStartTime));
}

/** A reap pass or a half-written leftover older than this is abandoned. */
const STALE_MS = 60_000;

/**
 * Removes slots whose runtime and holder are both dead. One reaper at a time (a directory made
 * atomically): a second reaper that read a stale slot could otherwise delete the fresh slot a
 * starter made after the first reaper removed it. Starters never delete, so they need no lock.
 */
export function reapStaleIdRanges(dir = idRangeDir()): number {
  const mutex = join(dir, '.reaping');
  try {
    mkdirSync(mutex);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return 0;
    if (!isErrno(e, 'EEXIST')) throw e;
    // another reaper is at it; one that died long ago is taken over
    if (ageMs(mutex) < STALE_MS) return 0;
  }
  let reaped = 0;
  try {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const half = name.startsWith('.new-') || name.includes('.tmp-');
      if (!half && !/^\d+$/.test(name)) continue;
      const s = half ? 'unreadable' : readSlot(path);
      if (s === 'missing') continue;
      if (s === 'unreadable' ? ageMs(path) < STALE_MS : slotLive(s)) continue;
      try {
        unlinkSync(path);
        if (!half) reaped++;
      } catch (e) {
        if (!isErrno(e, 'ENOENT')) throw e;
      }
    }
  } finally {
    rmdirSync(mutex);
  }
  return reaped;
}

function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

/** The slot files of live sandboxes (for tests and `ls`-style reports). */
export function liveIdRanges(dir = idRangeDir()): number[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return [];
    throw e;
  }
  return names
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .sort((a, b) => a - b);
}
