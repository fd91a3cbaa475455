/**
 * Node prefetch: many environments into the store at once, with a bound on the compressed bytes
 * being fetched at any moment (the I/O budget that keeps a node's disk and network from
 * thrashing when hundreds of environments arrive together).
 */
import type { Digest } from '../cas/digest.js';
import { type ErrorCode, errorMessage, MinisandboxError, throwIfAborted } from '../errors.js';
import type { EnvConfig, LayerRef } from '../layer/env.js';
import { exists } from '../util/fs.js';
import { runPool } from '../util/pool.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from './paths.js';
import { type LayerProgress, pullEnv, storedEnvConfig } from './pull.js';
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
  /** Uncompressed bytes of the objects fetched (what they take laid out). */
  fetchedBytes: number;
  /** Compressed bytes fetched from the registry for them. */
  fetchedCompressedBytes: number;
  durationMs: number;
  error?: string;
  /** The failure's code (NOT_FOUND for a ref the registry lacks), when it had one. */
  code?: ErrorCode;
}

/** The bytes of every pull of a prefetch so far, and of all it will fetch (see PullTally). */
export interface PrefetchProgress {
  refsDone: number;
  refsTotal: number;
  /** The ref whose layer moved last, and that layer's phase. */
  ref: string;
  phase: LayerProgress['phase'];
  doneBytes: number;
  totalBytes: number;
  compressedDoneBytes: number;
  compressedTotalBytes: number;
}

interface LayerTally {
  total: number;
  compressedTotal: number;
  done: number;
  compressedDone: number;
}

/**
 * Bytes done and to do across the layers of many pulls, each layer counted once (refs share
 * layers). A layer first counts as its estimate (its size, its packs' sizes: what a store that
 * holds none of its objects fetches), then as what its fetch plan says, and as done once laid out;
 * a layer another process laid out meanwhile drops out of both.
 */
export class PullTally {
  private readonly layers = new Map<Digest, LayerTally>();

  expect(layer: Digest, estimate: { bytes: number; compressedBytes: number }): void {
    if (!this.layers.has(layer)) this.layers.set(layer, { total: estimate.bytes, compressedTotal: estimate.compressedBytes, done: 0, compressedDone: 0 });
  }

  update(p: LayerProgress): void {
    const t = this.layers.get(p.layer);
    if (t === undefined) return; // laid out before the prefetch began: not part of its work
    if (p.phase === 'cached') {
      if (t.done === 0) this.layers.set(p.layer, { total: 0, compressedTotal: 0, done: 0, compressedDone: 0 });
    } else if (p.phase === 'done') {
      t.done = t.total;
      t.compressedDone = t.compressedTotal;
    } else if (p.phase === 'fetch') {
      if (p.totalBytes !== undefined) t.total = p.totalBytes;
      if (p.compressedTotalBytes !== undefined) t.compressedTotal = p.compressedTotalBytes;
      if (p.doneBytes !== undefined) t.done = p.doneBytes;
      if (p.compressedDoneBytes !== undefined) t.compressedDone = p.compressedDoneBytes;
    }
  }

  totals(): Pick<PrefetchProgress, 'doneBytes' | 'totalBytes' | 'compressedDoneBytes' | 'compressedTotalBytes'> {
    const r = { doneBytes: 0, totalBytes: 0, compressedDoneBytes: 0, compressedTotalBytes: 0 };
    for (const t of this.layers.values()) {
      r.doneBytes += t.done;
      r.totalBytes += t.total;
      r.compressedDoneBytes += t.compressedDone;
      r.compressedTotalBytes += t.compressedTotal;
    }
    return r;
  }
}

/** The layers of `ref` not laid out yet, with the sizes of their packs. */
async function pendingLayers(
  reg: Registry,
  store: StorePaths,
  config: EnvConfig,
  idShift: number,
): Promise<Array<{ layer: LayerRef; packBytes: Map<Digest, number> }>> {
  const sizes = new Map<Digest, number>();
  const out: Array<{ layer: LayerRef; packBytes: Map<Digest, number> }> = [];
  for (const l of config.layers) {
    if (await exists(store.layer(l.digest, idShift))) continue;
    const packBytes = new Map<Digest, number>();
    for (const p of l.packs) {
      if (!sizes.has(p.pack)) sizes.set(p.pack, (await reg.statBlob(p.pack))?.size ?? 0);
      packBytes.set(p.pack, sizes.get(p.pack) ?? 0);
    }
    out.push({ layer: l, packBytes });
  }
  return out;
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
  /** Called as bytes arrive (often: a consumer draws at its own pace). */
  onProgress?: (p: PrefetchProgress) => void;
}

/**
 * Pulls every ref, `jobs` at a time, within the I/O budget. Each environment's config is read
 * once (from the store where it has it) and handed to the pull; a layer several refs share is
 * laid out by one of them while the others wait for it (store/lock.ts), so a blob is fetched once.
 */
export async function prefetch(reg: Registry, store: StorePaths, refs: string[], opts: PrefetchOptions): Promise<PrefetchResult[]> {
  const budget = opts.budget ?? new ByteBudget(opts.budgetBytes ?? DEFAULT_PREFETCH_BUDGET);
  const results: PrefetchResult[] = [];
  const tally = new PullTally();
  // every failure is caught into its result, so one bad ref never stops the others
  await runPool(refs, opts.jobs, async (ref) => {
    const t0 = performance.now();
    let r: PrefetchResult;
    try {
      throwIfAborted(opts.signal, `prefetch ${ref}`);
      const digest = await resolveEnvDigest(reg, ref);
      const config = storedEnvConfig(store, digest) ?? (await readEnvConfig(reg, digest));
      const pending = await pendingLayers(reg, store, config, opts.idShift);
      // the budget holds an upper bound of what this pull fetches: the packs of its missing layers
      const packs = new Map<Digest, number>();
      for (const p of pending) {
        for (const [d, n] of p.packBytes) packs.set(d, n);
        tally.expect(p.layer.digest, { bytes: p.layer.size, compressedBytes: [...p.packBytes.values()].reduce((a, b) => a + b, 0) });
      }
      const want = [...packs.values()].reduce((a, b) => a + b, 0);
      const held = want === 0 ? 0 : await budget.acquire(want);
      try {
        const p = await pullEnv(reg, store, ref, {
          idShift: opts.idShift,
          resolved: { digest, config },
          ...(opts.signal === undefined ? {} : { signal: opts.signal }),
          ...(opts.onProgress === undefined
            ? {}
            : {
                onProgress: (lp: LayerProgress) => {
                  tally.update(lp);
                  opts.onProgress?.({ refsDone: results.length, refsTotal: refs.length, ref, phase: lp.phase, ...tally.totals() });
                },
              }),
        });
        r = {
          ref,
          status: p.fetchedObjects > 0 ? 'pulled' : 'present',
          env: p.digest,
          layers: p.layerDirs,
          fetchedBytes: p.fetchedBytes,
          fetchedCompressedBytes: p.fetchedCompressedBytes,
          durationMs: Math.round(performance.now() - t0),
        };
      } finally {
        if (held > 0) budget.release(held);
      }
    } catch (e) {
      r = {
        ref,
        status: 'failed',
        fetchedBytes: 0,
        fetchedCompressedBytes: 0,
        durationMs: Math.round(performance.now() - t0),
        error: errorMessage(e),
        ...(e instanceof MinisandboxError ? { code: e.code } : {}),
      };
    }
    results.push(r);
    opts.onResult?.(r, results.length);
  });
  return results;
}
