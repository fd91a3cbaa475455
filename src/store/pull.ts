/**
 * Bringing environments into a node's store: fetch only the objects the store lacks, verify every
 * byte against its digest, and lay each layer out once as a read-only tree (layer-pull.ts, loaded
 * only for a layer the store lacks).
 */
import { existsSync } from 'node:fs';
import { ownedName } from '../util/owned-name.js';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { throwIfAborted } from '../errors.js';
import { type EnvConfig, EnvConfigSchema, type LayerRef } from '../layer/env.js';
import type { Registry } from '../registry/registry.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { readTextOrUndefined } from '../util/fs.js';
import { randomHex } from '../util/lazy-crypto.js';
import type { StorePaths } from './paths.js';
import { ensurePrivateStore } from './private.js';
import { removeDeadLeftovers } from './leftovers.js';
import { readEnvConfig, resolveEnvDigest } from '../registry/resolve-env.js';

export interface PullOptions {
  idShift?: number;
  concurrency?: number;
  /** Bytes of fetched objects that may wait in memory for the lay-out (default 64 MiB; 0: all wait on disk). */
  heldBytes?: number;
  /**
   * Where fetched frames are decoded and their objects verified: in the lay-out's helper
   * process, where it was built with frame support (the default; see native/fsmeta.c), or here.
   */
  decodeIn?: 'helper' | 'node';
  /**
   * Who reads the manifest and decides the lay-out: the helper, where it decodes frames, owners
   * are as given and the manifest is plain (the default; see native/fsmeta-manifest.c), or node
   * (materialize.ts).
   */
  layOutIn?: 'helper' | 'node';
  onProgress?: (p: LayerProgress) => void;
  /** Stops the pull between layers (each layer is laid out whole or not at all): AbortedError. */
  signal?: AbortSignal;
  /** The environment `refOrDigest` names, already resolved and its config verified (prefetch's): not read again. */
  resolved?: { digest: Digest; config: EnvConfig };
}

/**
 * One layer's pull, as it goes: `manifest` (fetched), `fetch` (first with the objects and bytes it
 * will fetch, then with what came so far), `layout`, and `done` (laid out here) or `cached` (laid out
 * before, or by another process meanwhile: nothing fetched).
 */
export interface LayerProgress {
  layer: Digest;
  phase: 'manifest' | 'fetch' | 'layout' | 'cached' | 'done';
  objects?: number;
  /** fetch: uncompressed bytes of the objects to fetch, and compressed bytes of their frames. */
  totalBytes?: number;
  compressedTotalBytes?: number;
  /** fetch: what came so far. */
  doneBytes?: number;
  compressedDoneBytes?: number;
}

export interface PulledEnv {
  digest: Digest;
  env: EnvConfig;
  /** Laid-out layer directories, lowest first. */
  layerDirs: string[];
  fetchedObjects: number;
  /** Uncompressed bytes of the objects fetched. */
  fetchedBytes: number;
  /** Compressed bytes of the frames fetched for them. */
  fetchedCompressedBytes: number;
}

export async function pullEnv(reg: Registry, store: StorePaths, refOrDigest: string, opts: PullOptions = {}): Promise<PulledEnv> {
  await ensurePrivateStore(store);
  const digest = opts.resolved?.digest ?? (await resolveEnvDigest(reg, refOrDigest));
  const stored = storedEnvConfig(store, digest);
  const config = stored ?? opts.resolved?.config ?? (await readEnvConfig(reg, digest));
  const idShift = opts.idShift ?? 0;
  const layerDirs: string[] = [];
  let fetchedObjects = 0;
  let fetchedBytes = 0;
  let fetchedCompressedBytes = 0;
  for (const layer of config.layers) {
    throwIfAborted(opts.signal, `pull ${refOrDigest}`);
    let r = await laidOut(store, layer, idShift, opts);
    if (r === undefined) {
      await cleanedOnce(store);
      r = await ensureLayer(reg, store, layer, idShift, opts).catch(async (e: unknown) => {
        // a manifest refused for what it holds is refused for good: `ls` shows its refs broken
        const refused = await import('./refused.js');
        if (refused.isManifestRefusal(e)) await refused.recordRefused(store, layer.digest, (e as Error).message);
        throw e;
      });
    }
    layerDirs.push(r.dir);
    fetchedObjects += r.fetchedObjects;
    fetchedBytes += r.fetchedBytes;
    fetchedCompressedBytes += r.fetchedCompressedBytes;
  }
  if (stored === undefined) await writeAtomic(store, store.env(digest), canonicalJson(config));
  if (!refOrDigest.startsWith('sha256:')) await writeAtomic(store, store.ref(refOrDigest), `${digest}\n`);
  return { digest, env: config, layerDirs, fetchedObjects, fetchedBytes, fetchedCompressedBytes };
}

/**
 * The config of an environment this store has pulled whole (its config is written last, after
 * every layer): read from the store, not the registry. The store wrote it from a verified blob,
 * atomically, in a directory only its owner reaches; reading it back costs neither a registry
 * round trip (an S3 GET) nor a hash. Anything unreadable is fetched again.
 */
export function storedEnvConfig(store: StorePaths, digest: Digest): EnvConfig | undefined {
  const text = readTextOrUndefined(store.env(digest));
  if (text === undefined) return undefined;
  try {
    const r = EnvConfigSchema.safeParse(JSON.parse(text));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}

const cleaned = new WeakMap<StorePaths, Promise<number>>();

/**
 * The leftovers of killed commands are removed by the next pull that lays a layer out, once per
 * store in a process: not by an open of an environment the store holds whole, which would list
 * the store's tmp and layers dirs to find nothing (gc removes whatever is left meanwhile).
 */
function cleanedOnce(store: StorePaths): Promise<number> {
  let p = cleaned.get(store);
  if (p === undefined) cleaned.set(store, (p = removeDeadLeftovers(store)));
  return p;
}

/** A layer already laid out: what ensureLayer finds first, without loading the lay-out's code. */
async function laidOut(store: StorePaths, layer: LayerRef, idShift: number, opts: PullOptions): Promise<LayerPulled | undefined> {
  const dir = store.layer(layer.digest, idShift);
  if (!existsSync(dir)) return undefined;
  opts.onProgress?.({ layer: layer.digest, phase: 'cached' });
  return { dir, fetchedObjects: 0, fetchedBytes: 0, fetchedCompressedBytes: 0 };
}

export interface LayerPulled {
  dir: string;
  fetchedObjects: number;
  fetchedBytes: number;
  fetchedCompressedBytes: number;
}

/** Lays out one layer in the store unless it is there (see layer-pull.ts). */
export async function ensureLayer(reg: Registry, store: StorePaths, layer: LayerRef, idShift: number, opts: PullOptions = {}): Promise<LayerPulled> {
  return (await import('./layer-pull.js')).ensureLayer(reg, store, layer, idShift, opts);
}

/** The verified, uncompressed manifest of a layer, fetched once per store (see layer-pull.ts). */
export async function ensureManifest(reg: Registry, store: StorePaths, layer: LayerRef, opts: PullOptions = {}): Promise<string> {
  return (await import('./layer-pull.js')).ensureManifest(reg, store, layer, opts);
}

async function writeAtomic(store: StorePaths, path: string, data: string): Promise<void> {
  // Every open of a pulled env rewrites its ref and config: one read instead of four calls when
  // they already say the same (the common case, and a part of each sandbox start).
  if (readTextOrUndefined(path) === data) return;
  await mkdir(join(path, '..'), { recursive: true });
  await mkdir(store.tmpDir, { recursive: true });
  const tmp = join(store.tmpDir, ownedName('w-', randomHex(6)));
  await writeFile(tmp, data);
  await rename(tmp, path);
}
