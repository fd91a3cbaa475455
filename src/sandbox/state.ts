/**
 * Per-sandbox state on disk (`<stateDir>/<id>/state.json`), listing, and crash recovery: the
 * store's gc treats a live sandbox's lowerDirs as leased, and a restarted runtime reaps what a dead
 * one left behind.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { rm, rmdir, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { isErrno } from '../util/fs.js';
import { killAndThaw, removeCgroup, unthrottle } from './cgroup.js';
import { reapStaleIdRanges, releaseIdRange } from './idpool.js';
import { parentPid, processStartTime, sameProcessAlive, trySignal } from './proc.js';
import { IdMapSchema, type IdMap } from '../host/subid.js';
import { removeTreeAs } from '../host/userns.js';
import { SANDBOX_ID_RE } from './sandbox-id.js';

export { SANDBOX_ID_RE } from './sandbox-id.js';

export const SandboxStateSchema = z.strictObject({
  version: z.literal(1),
  id: z.string().regex(SANDBOX_ID_RE),
  /** The runtime process that owns the sandbox; when it dies the sandbox is stale. */
  ownerPid: z.number().int().positive(),
  ownerStartTime: z.string().optional(),
  /** Host pid of the holder (keeps the sandbox's user+mount namespaces); 0 until started. */
  holderPid: z.number().int().min(0),
  holderStartTime: z.string().optional(),
  /** Host pid of the sandbox's pid-1 (inside its pid, net, ipc and uts namespaces). */
  initPid: z.number().int().min(0),
  /** Its start time: a pid 1 can outlive its holder, and its pid be anyone's by the time a reap comes. */
  initStartTime: z.string().optional(),
  lowerDirs: z.array(z.string()),
  upperDir: z.string(),
  upperKind: z.enum(['tmpfs', 'disk']),
  mergedDir: z.string(),
  network: z.enum(['none', 'host']),
  cgroupDirs: z.array(z.string()),
  /** Where its processes are frozen as one (one of cgroupDirs; see freeze.ts); without it, the SIGSTOP sweep holds it. */
  freezer: z.strictObject({ version: z.union([z.literal(1), z.literal(2)]), dir: z.string() }).optional(),
  idMap: IdMapSchema,
  /** The slot file of the sandbox's own id range (idpool.ts), released at teardown. */
  idSlot: z.string().optional(),
  /** Its lower dirs are mounted idmapped (they hold real owners). */
  idmapLowers: z.boolean().optional(),
  createdAt: z.string(),
  forkedFrom: z.string().optional(),
  /** A second holder started ahead over the creation layers, which the next reset() swaps in (sandbox.ts). */
  standby: z
    .strictObject({
      holderPid: z.number().int().positive(),
      holderStartTime: z.string().optional(),
      initPid: z.number().int().min(0),
      initStartTime: z.string().optional(),
    })
    .optional(),
});
export type SandboxState = z.infer<typeof SandboxStateSchema>;

export function sandboxDir(stateDir: string, id: string): string {
  return join(stateDir, id);
}

/**
 * Synchronous: a few hundred bytes, written on every sandbox start, where latency is the product.
 * Not parsed on the way out (the type is the schema's, and every reader parses it): validating
 * our own object cost each one-shot run's two writes more than writing them.
 */
export function writeState(stateDir: string, state: SandboxState): void {
  const dir = sandboxDir(stateDir, state.id);
  const file = join(dir, 'state.json');
  writeFileSync(`${file}.tmp`, JSON.stringify(state));
  renameSync(`${file}.tmp`, file);
}

export async function readState(stateDir: string, id: string): Promise<SandboxState | undefined> {
  try {
    const parsed = SandboxStateSchema.safeParse(JSON.parse(readFileSync(join(sandboxDir(stateDir, id), 'state.json'), 'utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

export interface SandboxListing {
  id: string;
  state: SandboxState | undefined;
  /** The owning runtime process is alive (so the sandbox, and its lease on lowerDirs, is live). */
  live: boolean;
}

export async function listSandboxes(stateDir: string): Promise<SandboxListing[]> {
  let names: string[];
  try {
    // synchronous, like readState: one directory and a small file per sandbox, on every start's reap.
    // Only directories: a file whose name looks like an id with a node (`notes.txt`) is no sandbox.
    names = readdirSync(stateDir, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return [];
    throw e;
  }
  const out: SandboxListing[] = [];
  for (const id of names.sort()) {
    if (!SANDBOX_ID_RE.test(id)) continue;
    const state = await readState(stateDir, id);
    const live = state !== undefined && sameProcessAlive(state.ownerPid, state.ownerStartTime);
    out.push({ id, state, live });
  }
  return out;
}

/** A directory whose state never got written is left alone this long (its creator may be mid-way). */
const STATELESS_GRACE_MS = 60_000;

/**
 * Kills, unmounts (by ending the namespaces that hold the mounts) and removes every sandbox whose
 * owning runtime is dead. Returns the ids reaped.
 */
export async function reapStaleSandboxes(stateDir: string, idMapForRemoval?: IdMap): Promise<string[]> {
  const reaped: string[] = [];
  for (const entry of await listSandboxes(stateDir)) {
    if (entry.live) continue;
    const dir = sandboxDir(stateDir, entry.id);
    if (entry.state === undefined) {
      const st = await stat(dir).catch(() => undefined);
      if (st !== undefined && Date.now() - st.mtimeMs < STATELESS_GRACE_MS) continue;
    }
    await teardown(stateDir, entry.id, entry.state, idMapForRemoval);
    reaped.push(entry.id);
  }
  // slots of sandboxes whose state dirs are already gone (a runtime killed mid-teardown)
  if (process.getuid?.() === 0) reapStaleIdRanges();
  await reapFrozenLeftovers(stateDir, idMapForRemoval);
  return reaped;
}

/**
 * Frozen fork copies (frozen.ts: `.fork-*`, named without a state file of their own) that no live
 * sandbox has among its lower dirs, left by a runtime that died: removed once past the grace a
 * fork in progress needs to start its children.
 */
async function reapFrozenLeftovers(stateDir: string, idMap: IdMap | undefined): Promise<void> {
  let names: string[];
  try {
    names = readdirSync(stateDir).filter((n) => n.startsWith('.fork-'));
  } catch {
    return;
  }
  if (names.length === 0) return;
  const used = new Set<string>();
  for (const e of await listSandboxes(stateDir)) if (e.live && e.state !== undefined) for (const d of e.state.lowerDirs) used.add(d);
  for (const n of names) {
    const dir = join(stateDir, n);
    const st = await stat(dir).catch(() => undefined);
    if (used.has(dir) || st === undefined || Date.now() - st.mtimeMs < STATELESS_GRACE_MS) continue;
    await removeTree(dir, idMap).catch(() => undefined);
  }
}

/** Ends the sandbox's processes, cgroups and directory. Idempotent; used by destroy and reap. */
export async function teardown(stateDir: string, id: string, state: SandboxState | undefined, idMap?: IdMap): Promise<void> {
  if (state !== undefined) {
    await unthrottle(state.cgroupDirs);
    // The holder is pid 1's parent; pid 1 dying ends every process in the sandbox's pid namespace,
    // and the last process leaving the mount namespace unmounts the overlay and the tmpfs.
    const procs = [...chainOf(state)];
    if (state.standby !== undefined) procs.push(...chainOf(state.standby));
    for (const [pid, start] of procs) {
      if (sameProcessAlive(pid, start)) trySignal(pid, 'SIGKILL');
    }
    // a frozen sandbox (a snapshot or fork holding it) dies only once thawed
    await killAndThaw(state.cgroupDirs);
    // SIGKILL takes effect when the victim next runs: wait for it, so that "destroyed" means gone.
    for (const [pid, start] of procs) await waitGone(pid, start);
    await removeCgroup(state.cgroupDirs);
  }
  try {
    // A tmpfs upper left only a few empty dirs and state.json, removed directly; a disk upper may
    // be large and hold files of subordinate ids (see removeTree).
    await removeTree(sandboxDir(stateDir, id), idMap ?? state?.idMap, { small: state?.upperKind === 'tmpfs' });
  } finally {
    // Only now, with every process and file of the range gone, may another sandbox take its ids.
    if (state?.idSlot !== undefined) releaseIdRange(state.idSlot, id);
  }
}

/**
 * A holder and its pid 1 as [pid, start time], init first: only a process that is still the
 * sandbox's is killed. pid 1 can outlive its holder, and pids come round fast (pid_max 32768
 * here): a state file without init's start time (written before it was recorded) counts its init
 * only while it is the live holder's child.
 */
function chainOf(s: { holderPid: number; holderStartTime?: string | undefined; initPid: number; initStartTime?: string | undefined }) {
  const holder = [s.holderPid, s.holderStartTime] as const;
  if (s.initPid <= 0) return [holder];
  if (s.initStartTime !== undefined) return [[s.initPid, s.initStartTime] as const, holder];
  const ownInit = sameProcessAlive(s.holderPid, s.holderStartTime) && parentPid(s.initPid) === s.holderPid;
  return ownInit ? [[s.initPid, processStartTime(s.initPid)] as const, holder] : [holder];
}

/** Up to ~2 s; polled every millisecond at first, since a killed process is usually gone in one or two. */
async function waitGone(pid: number, start: string | undefined): Promise<void> {
  for (let i = 0; i < 250 && pid > 0; i++) {
    if (!sameProcessAlive(pid, start)) return;
    await new Promise((r) => setTimeout(r, i < 50 ? 1 : 10));
  }
}

/**
 * Removes a sandbox directory. A disk upper dir holds files owned by subordinate ids that a
 * rootless owner cannot delete directly (see host/userns.ts). `small`: a tmpfs sandbox's few empty
 * dirs, removed directly. Never synchronously: removing a former mount point waits on the kernel's
 * mount locks, milliseconds each while other sandboxes tear down, and 128 destroys at once stalled
 * a server's every other request for over a second.
 */
export async function removeTree(dir: string, idMap: IdMap | undefined, opts: { small?: boolean } = {}): Promise<void> {
  if (opts.small === true) {
    if (await removeEmptySandboxDir(dir)) return;
    try {
      await rm(dir, { recursive: true, force: true, maxRetries: 3 });
      return;
    } catch (e) {
      if (idMap === undefined || !(isErrno(e, 'EACCES') || isErrno(e, 'EPERM'))) throw e;
    }
  }
  await removeTreeAs(idMap, dir);
}

/**
 * A tmpfs sandbox's dir as it is once its processes are gone: its state file and two empty mount
 * points. Removed by name, four calls, where rm's recursive walk took milliseconds of CPU, a good
 * part of a one-shot sandbox's whole cost; false (nothing lost) when it holds anything else.
 */
async function removeEmptySandboxDir(dir: string): Promise<boolean> {
  try {
    await unlink(join(dir, 'state.json')).catch((e: unknown) => {
      if (!isErrno(e, 'ENOENT')) throw e;
    });
    await Promise.all([rmdir(join(dir, 'upper')), rmdir(join(dir, 'root'))]);
    await rmdir(dir);
    return true;
  } catch {
    return false;
  }
}

/**
 * The sandboxes' dir. A holder starts from inside its own sandbox dir and gets its lower dirs as
 * open dirs (see sandbox-launch.c work_from_sandbox_dir), so no dir above may need to let the
 * sandbox's ids through: a store keeps its root its owner's alone (src/store/private.ts).
 */
export function makeStateDir(stateDir: string): void {
  // Searchable by others: the sandbox's own root (a subordinate id, "other" to us) walks through
  // each sandbox's dir to its mount points; names inside are not listable.
  mkdirSync(stateDir, { recursive: true, mode: 0o711 });
}
