/**
 * Node prefetch: many environments into the store at once, with a bound on the compressed bytes
 * being fetched at any moment (the I/O budget that keeps a node's disk and network from
 * thrashing when hundreds of environments arrive together).
 */
import type { Digest } from '../cas/digest.js';
import { type ErrorCode, errorMessage, MinisandboxError, throwIfAborted } from '../errors.js';
import type { EnvConfig } from '../layer/env.js';
import { exists } from '../util/fs.js';
import { runPool } from '../util/pool.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from './paths.js';
import { pullEnv, storedEnvConfig } from './pull.js';
import { readEnvConfig, resolveEnvDigest } from '../registry/resolve-env.js';

/** The I/O budget where none is given (as `pull --io-budget`'s default). */
export const DEFAULT_PREFETCH_BUDGET = 512 * 1024 ** 2;

/** A counting semaphore over bytes: a request larger than the whole budget waits for all of it. */
export class ByteBudget {
  private used = 0;
  private readonly waiters: { n: number; wake: () => void }[] = [];
  constructor(readonly limit: number) {}

  async acquire(n: number): Promise<number> {
    const want = Math.min(n, this.limit);
    if (this.waiters.length === 0 && this.used + want <= this.limit) {
      this.used += want;
      return want;
    }
    await new Promise<void>((wake) => this.waiters.push({ n: want, wake }));
    return want;
  }

  release(n: number): void {
    this.used -= n;
    while (this.waiters.length > 0 && this.used + this.waiters[0]!.n <= this.limit) {
      const w = this.waiters.shift()!;
      this.used += w.n;
      w.wake();
    }
  }
}

export interface PrefetchResult {
  ref: string;
  status: 'pulled' | 'present' | 'failed';
  env?: Digest;
  /** Laid-out layer directories, lowest first. */
  layers?: string[];
  fetchedBytes: number;
  seconds: number;
  error?: string;
  /** The failure's code (NOT_FOUND for a ref the registry lacks), when it had one. */
  code?: ErrorCode;
}

/** Upper bound of what pulling an environment will fetch: the packs of its layers not yet laid out. */
async function pendingPackBytes(reg: Registry, store: StorePaths, config: EnvConfig, idShift: number): Promise<number> {
  const packs = new Set<Digest>();
  for (const l of config.layers) {
    const present = await exists(store.layer(l.digest, idShift));
    if (!present) for (const p of l.packs) packs.add(p.pack);
  }
  let n = 0;
  for (const p of packs) n += (await reg.statBlob(p))?.size ?? 0;
  return n;
}

export interface PrefetchOptions {
  idShift: number;
  jobs: number;
  /** Compressed bytes being fetched at once: a budget of its own of this many bytes ... */
  budgetBytes?: number;
  /** ... or one shared with other prefetches (a server's). */
  budget?: ByteBudget;
  /** Stops the pulls between layers; the refs not pulled yet end failed (ABORTED). */
  signal?: AbortSignal;
  onResult?: (r: PrefetchResult, done: number) => void;
}

/**
 * Pulls every ref, `jobs` at a time, within the I/O budget. Each environment's config is read
 * once (from the store where it has it) and handed to the pull; a layer several refs share is
 * laid out by one of them while the others wait for it (store/lock.ts), so a blob is fetched once.
 */
export async function prefetch(reg: Registry, store: StorePaths, refs: string[], opts: PrefetchOptions): Promise<PrefetchResult[]> {
  const budget = opts.budget ?? new ByteBudget(opts.budgetBytes ?? DEFAULT_PREFETCH_BUDGET);
  const results: PrefetchResult[] = [];
  // every failure is caught into its result, so one bad ref never stops the others
  await runPool(refs, opts.jobs, async (ref) => {
    const t0 = performance.now();
    let r: PrefetchResult;
    try {
      throwIfAborted(opts.signal, `prefetch ${ref}`);
      const digest = await resolveEnvDigest(reg, ref);
      const config = storedEnvConfig(store, digest) ?? (await readEnvConfig(reg, digest));
      const pending = await pendingPackBytes(reg, store, config, opts.idShift);
      const held = pending === 0 ? 0 : await budget.acquire(pending);
      try {
        const p = await pullEnv(reg, store, ref, {
          idShift: opts.idShift,
          resolved: { digest, config },
          ...(opts.signal === undefined ? {} : { signal: opts.signal }),
        });
        r = {
          ref,
          status: p.fetchedObjects > 0 ? 'pulled' : 'present',
          env: p.digest,
          layers: p.layerDirs,
          fetchedBytes: p.fetchedBytes,
          seconds: (performance.now() - t0) / 1000,
        };
      } finally {
        if (held > 0) budget.release(held);
      }
    } catch (e) {
      r = {
        ref,
        status: 'failed',
        fetchedBytes: 0,
        seconds: (performance.now() - t0) / 1000,
        error: errorMessage(e),
        ...(e instanceof MinisandboxError ? { code: e.code } : {}),
      };
    }
    results.push(r);
    opts.onResult?.(r, results.length);
  });
  return results;
}
