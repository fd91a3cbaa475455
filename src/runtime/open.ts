/**
 * From a ref to a running sandbox: pull the environment into the store laid out for this host's
 * id map, lease its layers for the sandbox's lifetime, start the sandbox over them.
 */
import { HostCapabilityError, throwIfAborted } from '../errors.js';
import type { RuntimeConfig } from '../layer/env.js';
import type { Registry } from '../registry/registry.js';
import { type CreateHooks, type Sandbox, type SandboxOptions, createSandbox, forkSandbox, probeHost, reapStaleSandboxes } from '../sandbox/index.js';
import { acquireLease, releaseLease } from '../store/leases.js';
import type { StorePaths } from '../store/paths.js';
import { type PullOptions, pullEnv } from '../store/pull.js';

export interface OpenOptions extends Omit<SandboxOptions, 'lowerDirs' | 'stateDir' | 'config'> {
  /** Runtime config fields that override the environment's. */
  config?: Partial<RuntimeConfig>;
  onPull?: PullOptions['onProgress'];
  warn?: (message: string) => void;
  /**
   * Cancels the open: the pull stops between layers, and a sandbox that started meanwhile is
   * destroyed; the call then rejects with AbortedError (code ABORTED). Once the sandbox is returned,
   * the signal is the caller's to pass to exec/run.
   */
  signal?: AbortSignal;
}

export async function openSandbox(reg: Registry, store: StorePaths, ref: string, opts: OpenOptions = {}): Promise<Sandbox> {
  const { config, onPull, warn, signal, ...rest } = opts;
  throwIfAborted(signal, `open ${ref}`);
  const host = await probeHost();
  const pulled = await pullEnv(reg, store, ref, { idShift: idShiftOf(host.idMap), ...(onPull ? { onProgress: onPull } : {}), ...(signal ? { signal } : {}) });
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
  const sb = await createSandbox(
    {
      ...rest,
      lowerDirs: pulled.layerDirs,
      stateDir: store.sandboxesDir,
      config: { ...pulled.env.config, ...(config ?? {}), env: { ...pulled.env.config.env, ...(config?.env ?? {}) } },
    },
    hooks,
  );
  if (signal?.aborted === true) {
    // aborted while the sandbox started: nobody will get it to destroy
    await sb.destroy();
    throwIfAborted(signal, `open ${ref}`);
  }
  return sb;
}

/**
 * Branches a sandbox's current filesystem state into `n` new sandboxes (GRPO-style sampling from
 * one state). The lower layers are shared, never copied; each branch holds its own lease.
 */
export async function forkLeased(store: StorePaths, sb: Sandbox, n: number): Promise<Sandbox[]> {
  return forkSandbox(sb, n, {
    host: sb.host,
    onCreated: async (state) => void (await acquireLease(store, state.id, state.lowerDirs)),
    onDestroyed: async (state) => releaseLease(store, state.id),
  });
}

/** Layers are laid out with one shift for owners and groups, so the two ranges must start together. */
export function idShiftOf(idMap: { uidStart: number; gidStart: number }): number {
  if (idMap.uidStart !== idMap.gidStart) {
    throw new HostCapabilityError(
      `the subordinate uid range starts at ${idMap.uidStart} but the gid range at ${idMap.gidStart}`,
      'give this user ranges with the same start in /etc/subuid and /etc/subgid',
    );
  }
  return idMap.uidStart;
}

/** The owner shift this host's sandboxes lay layers out with (0 where sandboxes cannot run). */
export async function hostIdShift(): Promise<number> {
  try {
    return idShiftOf((await probeHost()).idMap);
  } catch (e) {
    // root can still lay out unshifted trees; anyone else could not give them their owners
    if (process.getuid?.() === 0) return 0;
    throw e;
  }
}

/** After a runtime crash: kill, unmount and remove sandboxes whose owner died (and their leases). */
export async function reapStale(store: StorePaths): Promise<number> {
  const reaped = await reapStaleSandboxes(store.sandboxesDir);
  for (const id of reaped) await releaseLease(store, id);
  return reaped.length;
}
