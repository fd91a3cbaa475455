/**
 * Pre-warming: environments pulled and laid out in the node's store ahead of the creates that use
 * them, a few at a time, each reported on its own (one bad ref never stops the others): what a
 * request waits for (POST /v1/prewarm) and what runs in the background (node-prefetch.ts).
 */
import { NotFoundError } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import { hostIdShift } from '../runtime/open.js';
import type { StorePaths } from '../store/paths.js';
import { prefetch } from '../store/prefetch.js';

export type PrewarmResult = { ref: string; ok: true; fetched_bytes: number } | { ref: string; ok: false; error: { code: string; message: string } };

/** Environments pulled at once: enough to overlap registry round trips, few enough for 2 cores. */
export const PREWARM_JOBS = 4;

/** The refs tagged `<dataset>/<instance>` in the registry, sorted. */
export async function datasetRefs(reg: Registry, dataset: string): Promise<string[]> {
  const prefix = `${dataset}/`;
  const out: string[] = [];
  for await (const r of reg.listRefs()) if (r.name.startsWith(prefix) && !r.name.slice(prefix.length).includes('/')) out.push(r.name);
  if (out.length === 0)
    throw new NotFoundError(`environments tagged ${prefix}* in registry ${reg.url}`, 'list the refs with `minisandbox ls`; build the dataset first');
  return out.sort();
}

/**
 * POST /v1/prewarm: the refs pulled now (store/prefetch.ts, as the node's background prefetch
 * and `pull` do), answered when all are in. `signal` (the client went away) stops the pulls
 * between layers; what is laid out stays.
 */
export async function prewarm(
  reg: Registry,
  store: StorePaths,
  refs: readonly string[],
  opts: { jobs?: number; signal?: AbortSignal } = {},
): Promise<PrewarmResult[]> {
  // the owner shift the sandboxes' creates will ask for, so they find these lay-outs
  const idShift = await hostIdShift(store);
  const unique = [...new Set(refs)];
  const results = new Map<string, PrewarmResult>();
  for (const r of await prefetch(reg, store, unique, { idShift, jobs: opts.jobs ?? PREWARM_JOBS, ...(opts.signal ? { signal: opts.signal } : {}) })) {
    results.set(
      r.ref,
      r.status === 'failed'
        ? { ref: r.ref, ok: false, error: { code: r.code ?? 'INTERNAL', message: r.error ?? 'failed' } }
        : { ref: r.ref, ok: true, fetched_bytes: r.fetchedBytes },
    );
  }
  return unique.map((r) => results.get(r)!);
}
