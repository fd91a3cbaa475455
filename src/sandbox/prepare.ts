/**
 * What every sandbox start does before its launcher runs, shared by createSandbox (a holder kept
 * for many commands) and runOnce (one command in a sandbox of its own): the state dir and state
 * file (so reapStaleSandboxes finds what a dead runtime left), the id range, the upper and merged
 * dirs, the cgroup with its limits (rlimits where no cgroup is writable), and the holder's spec.
 */
import { chmodSync, chownSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidInputError } from '../errors.js';
import type { IdMap } from '../host/subid.js';
import { createSandboxCgroup, removeCgroup, type SandboxCgroup } from './cgroup.js';
import { resolveBindMounts } from './bind-mounts.js';
import type { HolderSpec, Rlimits } from './commands.js';
import type { HostInfo } from './host.js';
import { allocateIdRange, type IdPool, releaseIdRange, resolveIdPool } from './idpool.js';
import { processStartTime } from './proc.js';
import type { SandboxOptionsSchema } from './sandbox.js';
import { makeStateDir, sandboxDir, teardown, writeState, type SandboxState } from './state.js';
import type { z } from 'zod';
import { mark } from '../util/timing.js';
import { newSandboxId } from './sandbox-id.js';

type ParsedOptions = z.output<typeof SandboxOptionsSchema>;

export interface PreparedSandbox {
  id: string;
  /** Written to disk already (holderPid 0 until the caller records its launcher). */
  state: SandboxState;
  cgroup: SandboxCgroup | undefined;
  /** Limits the host could not enforce through cgroups (rlimits stand in). */
  unenforced: string[];
  /** A command's rlimits (RLIMIT_NPROC included where pids fell back to it). */
  rlimits: Rlimits;
  /** The holder's spec (its rlimits without RLIMIT_NPROC, see there). */
  spec: HolderSpec;
}

/** Everything up to the launcher; on failure what it made is removed again. */
export async function prepareSandbox(
  opts: ParsedOptions,
  host: HostInfo,
  warn: (message: string) => void,
  from: { forkedFrom?: string | undefined; fromTar?: boolean; holdable?: boolean } = {},
): Promise<PreparedSandbox> {
  const id = opts.id ?? newSandboxId(opts.idNode);
  if (opts.idmapLowers && !host.isRoot) {
    throw new InvalidInputError(
      'idmapped lower layers need root',
      'lay layers out shifted for this user (pull with `--id-shift auto`) and leave idmapLowers off',
    );
  }
  // sources resolved once, here: the launcher refuses a symlink swapped in since
  const binds = resolveBindMounts(opts.mounts, process.getuid?.() ?? 0);
  // The holder reaches its dir from inside it (and its lower dirs as open dirs): the dirs above may be private.
  mark('start: options parsed');
  makeStateDir(opts.stateDir);
  const dir = sandboxDir(opts.stateDir, id);
  // Over idmapped layers, a range of the sandbox's own; else the one its layers were shifted to.
  const range = opts.idmapLowers ? sandboxIdRange(id, host.idMap, warn) : { idMap: host.idMap };
  try {
    mkdirSync(dir, { mode: 0o711 });
  } catch (e) {
    if (range.slotPath !== undefined) releaseIdRange(range.slotPath, id);
    throw new InvalidInputError(`cannot create sandbox dir ${dir}: ${String(e)}`, 'pick another id, or run reapStaleSandboxes on the state dir');
  }
  const upperDir = join(dir, 'upper');
  const mergedDir = join(dir, 'root');
  const state: SandboxState = {
    version: 1,
    id,
    ownerPid: process.pid,
    ownerStartTime: processStartTime(process.pid),
    holderPid: 0,
    initPid: 0,
    lowerDirs: opts.lowerDirs,
    upperDir,
    upperKind: opts.upper,
    mergedDir,
    network: opts.network,
    cgroupDirs: [],
    idMap: range.idMap,
    ...(range.slotPath === undefined ? {} : { idSlot: range.slotPath }),
    ...(opts.idmapLowers ? { idmapLowers: true } : {}),
    createdAt: new Date().toISOString(),
    ...(from.forkedFrom === undefined ? {} : { forkedFrom: from.forkedFrom }),
  };
  let cgroup: SandboxCgroup | undefined;
  try {
    makeUpperDir(upperDir, opts.upper, host.isRoot, range.idMap);
    mkdirSync(mergedDir, { mode: 0o711 });
    writeState(opts.stateDir, state);
    mark('start: state written');
    const { memoryBytes, pids, cpus } = opts.limits;
    // a sandbox that may be held (snapshot, fork) gets a freezer group even without limits
    cgroup = await createSandboxCgroup(`msb-${id}`, { memoryBytes, pids, cpus }, { freezer: from.holdable === true });
    const unenforced = cgroup === undefined ? (['memoryBytes', 'pids', 'cpus'] as const).filter((k) => opts.limits[k] !== undefined) : cgroup.unenforced;
    if (unenforced.length > 0) {
      warn(
        `sandbox ${id}: no writable cgroup for ${unenforced.join(', ')}; falling back to rlimits (memory: RLIMIT_AS per process; pids: ` +
          `RLIMIT_NPROC, shared by every sandbox of this user; cpu: not limited). Run as root or delegate a cgroup v2 subtree to enforce them.`,
      );
    }
    state.cgroupDirs = cgroup?.dirs ?? [];
    if (cgroup?.freezer !== undefined) state.freezer = cgroup.freezer;
    mark('start: cgroup');
    const rlimits: Rlimits = {
      nofile: opts.limits.nofile,
      core: 0,
      nice: opts.limits.nice,
      nproc: unenforced.includes('pids') ? opts.limits.pids : undefined,
      asBytes: unenforced.includes('memoryBytes') ? opts.limits.memoryBytes : undefined,
    };
    const spec: HolderSpec = {
      launcher: host.tools.launcher,
      idMap: range.idMap,
      idmapLowers: opts.idmapLowers,
      upperDir,
      mergedDir,
      lowerDirs: opts.lowerDirs,
      tmpfsBytes: opts.upper === 'tmpfs' ? opts.limits.diskBytes : undefined,
      volatileUpper: opts.volatileUpper,
      network: opts.network,
      hostname: opts.config.hostname,
      workdir: opts.config.workdir,
      fromTar: from.fromTar === true,
      // Not RLIMIT_NPROC: a user namespace takes its creator's value as a ceiling on every process
      // of the creating user (the runtime's own threads included); commands get it on entry instead.
      rlimits: { ...rlimits, nproc: undefined },
      cgroupProcs: cgroup?.procsFiles ?? [],
      binds,
    };
    return { id, state, cgroup, unenforced: [...unenforced], rlimits, spec };
  } catch (e) {
    await endSandbox(opts.stateDir, state, cgroup);
    throw e;
  }
}

/** Kills what is left of a sandbox's processes and removes its dir, cgroup and id range (a failed start, a one-shot's end). */
export async function endSandbox(stateDir: string, state: SandboxState, cgroup: SandboxCgroup | undefined): Promise<void> {
  await teardown(stateDir, state.id, state);
  if (cgroup !== undefined) await removeCgroup(cgroup.dirs);
}

/** The upper dir of a new sandbox, or a reset one's fresh one. */
export function makeUpperDir(upperDir: string, kind: 'tmpfs' | 'disk', isRoot: boolean, idMap: IdMap): void {
  mkdirSync(upperDir, { mode: kind === 'disk' ? 0o700 : 0o711 });
  // A disk upper is written by the sandbox's root, i.e. the first id of the mapped range; the
  // mkdir mode alone would be cut by the umask (and world-writable would be wrong anyway).
  if (kind === 'disk') {
    // Rootless owners cannot chown to a subordinate id: open the dir instead (its parent is 0711,
    // so only someone who knows the random sandbox id could reach it).
    if (isRoot) chownSync(upperDir, idMap.uidStart, idMap.gidStart);
    else chmodSync(upperDir, 0o777);
  }
}

let pool: { value: IdPool | undefined } | undefined;
let warnedNoPool = false;

/** The id range of a sandbox over idmapped layers: a slot of root's pool, or the shared range if it has none. */
function sandboxIdRange(id: string, shared: IdMap, warn: (m: string) => void): { idMap: IdMap; slotPath?: string } {
  pool ??= { value: resolveIdPool() };
  if (pool.value === undefined) {
    if (!warnedNoPool) {
      warnedNoPool = true;
      warn(
        `root's subordinate ranges (/etc/subuid, /etc/subgid) hold no more than one sandbox's ${shared.count} ids: every sandbox shares ` +
          `uids ${shared.uidStart}.. Give root a larger range (\`bin/setup\` writes root:1000000:1000000000) so each sandbox gets its own.`,
      );
    }
    return { idMap: shared };
  }
  const lease = allocateIdRange(pool.value, id);
  return { idMap: lease.idMap, slotPath: lease.path };
}
