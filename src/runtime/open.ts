/**
 * From a ref to a running sandbox: pull the environment into the store, lease its layers for the
 * sandbox's lifetime, start the sandbox over them. As root, layers are laid out once with their
 * real owners (what builds and export use too) and mounted idmapped per sandbox, each sandbox with
 * an id range of its own; an unprivileged user's store, or a host without idmapped mounts, lays
 * them out shifted into the one range its sandboxes share.
 */
import { throwIfAborted } from '../errors.js';
import { idShiftOf } from '../host/subid.js';
import type { RuntimeConfig } from '../layer/env.js';
import type { Registry } from '../registry/registry.js';
import {
  type CreateHooks,
  type HostInfo,
  type Sandbox,
  type SandboxOptions,
  createSandbox,
  type ForkResult,
  type SandboxOrigin,
  forkSandboxShared,
  probeHost,
  reapStaleSandboxes,
  runOnce as runInFreshSandbox,
  type RunOnceOptions as SandboxRunOnceOptions,
  type CommandOutcome,
} from '../sandbox/index.js';
import { probeIdmappedLayers } from '../sandbox/idmap.js';
import { type RunInPlaceOptions, runInPlace as runInPlaceOf } from '../sandbox/run-in-place.js';
import { acquireLease, leaseFile, releaseLease } from '../store/leases.js';
import type { ExecInPlace } from '../util/exec-in-place.js';
import type { StorePaths } from '../store/paths.js';
import { type PullOptions, pullEnv } from '../store/pull.js';
import { mark } from '../util/timing.js';
import type { GitStatCache } from './git-stat-cache.js';

export interface OpenOptions extends Omit<SandboxOptions, 'lowerDirs' | 'stateDir' | 'config'> {
  /** Runtime config fields that override the environment's. */
  config?: Partial<RuntimeConfig>;
  onPull?: PullOptions['onProgress'];
  warn?: (message: string) => void;
  /**
   * The host probe to start over (probeHost's result). A long-lived caller (the server) probes once
   * and passes it: the probe is dozens of file-system calls, a large part of a sandbox start.
   */
  host?: HostInfo;
  /**
   * Cancels the open: the pull stops between layers, and a sandbox that started meanwhile is
   * destroyed; the call then rejects with AbortedError (code ABORTED). Once the sandbox is returned,
   * the signal is the caller's to pass to exec/run.
   */
  signal?: AbortSignal;
  /**
   * Gives the git repositories of the environment a stat cache valid in the sandbox before its
   * first command (see git-stat-cache.ts): without it their first `git status` re-hashes every
   * file. One per long-lived caller (the server's), remembering what each environment holds.
   */
  gitStatCache?: GitStatCache;
}

export async function openSandbox(reg: Registry, store: StorePaths, ref: string, opts: OpenOptions = {}): Promise<Sandbox> {
  const { signal } = opts;
  const { options, hooks, origin } = await pulledSandbox(reg, store, ref, opts);
  const sb = await createSandbox(options, hooks);
  sb.origin = sb.creationOrigin = origin;
  if (opts.gitStatCache !== undefined) await refreshGitIndexes(sb, store, opts.gitStatCache, opts.warn);
  if (signal?.aborted === true) {
    // aborted while the sandbox started: nobody will get it to destroy
    await sb.destroy();
    throwIfAborted(signal, `open ${ref}`);
  }
  return sb;
}

/**
 * Writes the environment's git indexes, their stat data made the laid-out files', into the
 * sandbox (see git-stat-cache.ts), as its own root would, before any command of the caller's.
 * Only over the environment's own layers (a fork's state carries its parent's index). A failure
 * only warns: git then re-hashes, as it would have without.
 */
export async function refreshGitIndexes(sb: Sandbox, store: StorePaths, cache: GitStatCache, warn?: (message: string) => void): Promise<void> {
  const layers = sb.origin?.env.config.layers;
  const dirs = sb.state.lowerDirs;
  if (layers === undefined || layers.length !== dirs.length) return;
  try {
    const fixes = await cache.fixes(
      layers.map((l, i) => ({ dir: dirs[i]!, manifest: store.manifest(l.digest) })),
      store.layersDir,
    );
    for (const f of fixes) {
      // only over the index the sandbox sees (a regular file of the size the plan read), never a new file
      const script = '[ -f "$1" ] && [ ! -h "$1" ] && [ "$(wc -c < "$1")" -eq "$2" ] || exit 3; cat > "$1" && chmod "$3" -- "$1"';
      const o = await sb.exec(['/bin/sh', '-c', script, 'msb-git-index', `/${f.path}`, String(f.data.length), f.mode.toString(8)], {
        stdin: f.data,
        user: { uid: f.uid, gid: f.gid },
        timeoutMs: 60_000,
      });
      if (o.status !== 'ok' || (o.exitCode !== 0 && o.exitCode !== 3))
        throw new Error(`writing /${f.path} ended ${o.status} ${o.exitCode ?? ''}: ${o.stderr.trim().slice(0, 400)}`);
    }
  } catch (e) {
    (warn ?? ((m: string) => process.emitWarning(m, 'MinisandboxWarning')))(
      `sandbox ${sb.id}: the git index stat refresh failed, its first git command re-hashes the work tree: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
}

export interface RunOnceOptions extends Omit<OpenOptions, 'prewarmReset' | 'timeoutMs'>, Omit<SandboxRunOnceOptions, 'signal'> {
  /** Told the sandbox's id once it is made (before the command runs). */
  onStart?: (sandboxId: string) => void;
  /** Run when argv is empty and the environment names no command of its own (default `/bin/sh`). */
  defaultCommand?: string[];
}

/**
 * What a run with no command runs, as a container runtime does: the environment's entrypoint and
 * command (an imported image's `Entrypoint` and `Cmd`), else `fallback`. A command that is given
 * replaces both (see README: where it differs from a container).
 */
export function commandOf(argv: string[], config: { entrypoint?: string[] | undefined; cmd?: string[] | undefined }, fallback = ['/bin/sh']): string[] {
  if (argv.length > 0) return argv;
  const own = [...(config.entrypoint ?? []), ...(config.cmd ?? [])];
  return own.length > 0 ? own : fallback;
}

/**
 * One command in a fresh sandbox of `ref` that lives only as long as the command (see
 * sandbox/run-once.ts): pulled, its layers leased for the run, released after. The signal cancels
 * the pull, or kills the command (outcome `killed`).
 */
export async function runOnce(reg: Registry, store: StorePaths, ref: string, argv: string[], opts: RunOnceOptions = {}): Promise<CommandOutcome> {
  const { timeoutMs, env, workdir, user, stdio, stdin, onStart, defaultCommand, ...open } = opts;
  const { options, hooks } = await pulledSandbox(reg, store, ref, open);
  return runInFreshSandbox(
    options,
    commandOf(argv, options.config ?? {}, defaultCommand),
    {
      ...runOverrides({ timeoutMs, env, workdir, user }),
      ...(open.signal === undefined ? {} : { signal: open.signal }),
      ...(stdio === undefined ? {} : { stdio }),
      ...(stdin === undefined ? {} : { stdin }),
      ...(open.maxOutputBytes === undefined ? {} : { maxOutputBytes: open.maxOutputBytes }),
    },
    announcingStart(hooks, onStart),
  );
}

/** The run's own settings that were given (the sandbox's defaults stand for the rest). */
function runOverrides(o: RunInPlaceOptions): RunInPlaceOptions {
  return {
    ...(o.timeoutMs === undefined ? {} : { timeoutMs: o.timeoutMs }),
    ...(o.env === undefined ? {} : { env: o.env }),
    ...(o.workdir === undefined ? {} : { workdir: o.workdir }),
    ...(o.user === undefined ? {} : { user: o.user }),
  };
}

/** The lease hooks, telling `onStart` the sandbox's id once it is made (before the command runs). */
function announcingStart(hooks: CreateHooks, onStart: ((sandboxId: string) => void) | undefined): CreateHooks {
  const onCreated = hooks.onCreated;
  return {
    ...hooks,
    onCreated: async (state) => {
      await onCreated?.(state);
      onStart?.(state.id);
    },
  };
}

/**
 * runOnce for a process that ends with its command (the CLI's `run`): pulled and leased the same
 * way, then this process becomes the launcher that runs the command and releases the lease
 * (sandbox/run-in-place.ts). Never returns but by throwing; the command's stdio is ours.
 */
export async function runInPlace(
  reg: Registry,
  store: StorePaths,
  ref: string,
  argv: string[],
  execve: ExecInPlace,
  opts: Omit<OpenOptions, 'prewarmReset' | 'timeoutMs'> & RunInPlaceOptions & Pick<RunOnceOptions, 'onStart' | 'defaultCommand'> = {},
): Promise<never> {
  const { timeoutMs, env, workdir, user, onStart, defaultCommand, ...open } = opts;
  const { options, hooks } = await pulledSandbox(reg, store, ref, open);
  return runInPlaceOf(options, commandOf(argv, options.config ?? {}, defaultCommand), runOverrides({ timeoutMs, env, workdir, user }), execve, {
    ...announcingStart(hooks, onStart),
    releasedFiles: (state) => [leaseFile(store, state.id)],
  });
}

/** What openSandbox and runOnce start a sandbox of `ref` with: pulled, with lease hooks. */
async function pulledSandbox(
  reg: Registry,
  store: StorePaths,
  ref: string,
  opts: OpenOptions,
): Promise<{ options: SandboxOptions; hooks: CreateHooks; origin: SandboxOrigin }> {
  const { config, onPull, warn, signal, host: given, gitStatCache: _statCache, ...rest } = opts;
  throwIfAborted(signal, `open ${ref}`);
  const host = given ?? (await probeHost());
  mark('open: host probed');
  const mapping = await layerMapping(store, host, warn);
  mark('open: layer mapping');
  const pulled = await pullEnv(reg, store, ref, { idShift: layerIdShift(mapping), ...(onPull ? { onProgress: onPull } : {}), ...(signal ? { signal } : {}) });
  mark('open: pulled');
  throwIfAborted(signal, `open ${ref}`);
  const hooks: CreateHooks = {
    host,
    onCreated: async (state) => {
      await acquireLease(store, state.id, pulled.layerDirs);
    },
    onDestroyed: async (state) => {
      await releaseLease(store, state.id);
    },
    ...(warn ? { warn } : {}),
  };
  const options: SandboxOptions = {
    ...rest,
    idmapLowers: mapping.kind === 'idmap',
    lowerDirs: pulled.layerDirs,
    stateDir: store.sandboxesDir,
    config: { ...pulled.env.config, ...(config ?? {}), env: { ...pulled.env.config.env, ...(config?.env ?? {}) } },
  };
  const origin: SandboxOrigin = { env: { digest: pulled.digest, config: pulled.env }, ...(ref.startsWith('sha256:') ? {} : { ref }) };
  return { options, hooks, origin };
}

/**
 * An environment of the registry laid out for this host's sandboxes, pulled if need be: what a
 * sandbox is reset over (a snapshot another node pushed, say); see resetLeased.
 */
export async function layOutEnv(
  reg: Registry,
  store: StorePaths,
  ref: string,
  host: HostInfo,
  opts: { signal?: AbortSignal; warn?: (message: string) => void } = {},
): Promise<{ lowerDirs: string[]; origin: SandboxOrigin }> {
  const mapping = await layerMapping(store, host, opts.warn);
  const pulled = await pullEnv(reg, store, ref, { idShift: layerIdShift(mapping), ...(opts.signal ? { signal: opts.signal } : {}) });
  return { lowerDirs: pulled.layerDirs, origin: { env: { digest: pulled.digest, config: pulled.env }, ...(ref.startsWith('sha256:') ? {} : { ref }) } };
}

/**
 * Leases for the children of a fork: each holds its lower dirs for its lifetime. Exported for
 * bench/fork-reset.ts, whose streaming-fork baseline leases as the library's forks do.
 */
export function forkChildHooks(store: StorePaths, sb: Sandbox): CreateHooks {
  return {
    host: sb.host,
    onCreated: async (state) => void (await acquireLease(store, state.id, state.lowerDirs)),
    onDestroyed: async (state) => releaseLease(store, state.id),
  };
}

/**
 * `n` children of a sandbox's current state sharing one frozen copy of its writes (see
 * sandbox/frozen.ts): the parent's upper is read once, whatever `n`. Each child is reported on its
 * own; each holds its own lease.
 */
export async function forkShared(store: StorePaths, sb: Sandbox, n: number): Promise<ForkResult[]> {
  return forkSandboxShared(sb, n, forkChildHooks(store, sb));
}

/**
 * Resets a sandbox (see Sandbox.reset) to its creation state, or over `to` (a snapshot's
 * environment, laid out: see runtime/snapshot.ts); its lease follows its lower dirs.
 */
export async function resetLeased(
  store: StorePaths,
  sb: Sandbox,
  to?: { lowerDirs: string[]; origin: SandboxOrigin },
  gitStatCache?: GitStatCache,
): Promise<void> {
  // lease the new lower dirs first, so no gc between the two leaves them unclaimed
  if (to !== undefined) await acquireLease(store, sb.id, [...new Set([...sb.state.lowerDirs, ...to.lowerDirs])]);
  await sb.reset(to === undefined ? {} : { lowerDirs: to.lowerDirs });
  sb.origin = to === undefined ? sb.creationOrigin : to.origin;
  await acquireLease(store, sb.id, sb.state.lowerDirs);
  // a fresh upper: the index is the layer's again
  if (gitStatCache !== undefined) await refreshGitIndexes(sb, store, gitStatCache);
}

/**
 * Branches a sandbox's current filesystem state into `n` new sandboxes (GRPO-style sampling from
 * one state): forkShared, all or none. The lower layers are shared, never copied, and the parent's
 * writes are copied once for all `n`; each branch holds its own lease. If a branch cannot start,
 * the others are destroyed and its error is thrown.
 */
export async function forkLeased(store: StorePaths, sb: Sandbox, n: number): Promise<Sandbox[]> {
  const results = await forkShared(store, sb, n);
  const started = results.flatMap((r) => (r.ok ? [r.sandbox] : []));
  const failed = results.find((r) => !r.ok);
  if (failed !== undefined) {
    await Promise.all(started.map((c) => c.destroy()));
    throw failed.error;
  }
  return started;
}

/**
 * How this host's sandboxes get their layers' owners: `idmap`, the layers hold their real owners and
 * each sandbox mounts them idmapped (root, where the kernel and the store's file system can); else
 * `shift`, the layers are laid out with owners shifted into the range every sandbox shares.
 */
export type LayerMapping = { kind: 'idmap' } | { kind: 'shift'; idShift: number };

let warnedShift = false;

export async function layerMapping(store: StorePaths, host: HostInfo, warn?: (message: string) => void): Promise<LayerMapping> {
  if (host.isRoot) {
    const s = await probeIdmappedLayers(host, store.layersDir);
    if (s.ok) return { kind: 'idmap' };
    if (!warnedShift) {
      warnedShift = true;
      const message =
        `idmapped mounts are not available for ${store.layersDir} (${s.reason}): sandboxes ` +
        `use layers laid out a second time, owned by uids from ${host.idMap.uidStart}, ` +
        'and all share that range. A kernel >= 5.12 and a store on ext4, xfs, btrfs or tmpfs give every layer one lay-out and every sandbox its own range.';
      (warn ?? ((m: string) => process.emitWarning(m, 'MinisandboxWarning')))(message);
    }
  }
  return { kind: 'shift', idShift: idShiftOf(host.idMap) };
}

export function layerIdShift(m: LayerMapping): number {
  return m.kind === 'idmap' ? 0 : m.idShift;
}

/**
 * The owner shift this host's sandboxes lay layers out with: 0 where they mount layers idmapped
 * (and where sandboxes cannot run, as root).
 */
export async function hostIdShift(store: StorePaths): Promise<number> {
  try {
    return layerIdShift(await layerMapping(store, await probeHost()));
  } catch (e) {
    // root can still lay out unshifted trees; anyone else could not give them their owners
    if (process.getuid?.() === 0) return 0;
    throw e;
  }
}

/**
 * Whether this store's `layers/<hex>+<shift>` trees are left over from before layers were mounted
 * idmapped (root's store on a host that can): nothing reads them any more, so gc removes them.
 */
export async function shiftedLayersObsolete(store: StorePaths): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  try {
    return (await layerMapping(store, await probeHost(), () => undefined)).kind === 'idmap';
  } catch {
    return false;
  }
}

/** After a runtime crash: kill, unmount and remove sandboxes whose owner died (and their leases). */
export async function reapStale(store: StorePaths): Promise<number> {
  const reaped = await reapStaleSandboxes(store.sandboxesDir);
  for (const id of reaped) await releaseLease(store, id);
  return reaped.length;
}
