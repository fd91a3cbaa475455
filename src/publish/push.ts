/**
 * Publishing a tree: capture it as a layer, pack the contents the registry lacks, upload packs,
 * indexes and the manifest, then the environment config, and only then the ref.
 * That order is the invariant that a ref never reaches a missing blob.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { parseRefName } from '../cas/ref-name.js';

import { captureLayer } from '../layer/capture.js';
import { ENV_MEDIA_TYPE, type EnvConfig, type LayerRef, type PackRef, type RuntimeConfig, RuntimeConfigSchema } from '../layer/env.js';
import { publishPacks } from '../pack/publish.js';
import { PackWriter } from '../pack/writer.js';
import { putJsonBlob } from '../registry/blobs.js';
import type { Registry } from '../registry/registry.js';
import { NotFoundError } from '../errors.js';
import { loadCatalog, type ObjectCatalog } from '../store/catalog.js';
import type { StorePaths } from '../store/paths.js';
import { compressFile } from '../store/zstdfile.js';
import { ownedName } from '../util/owned-name.js';

export interface PushOptions {
  /** Environment to stack the new layer on. */
  parent?: { digest: Digest; config: EnvConfig } | null;
  /** Runtime config fields to set on top of the parent's. */
  config?: Partial<RuntimeConfig>;
  tag?: string;
  overlayUpper?: boolean;
  idShift?: number;
  /** Capture `dir` as given, unresolved (see CaptureOptions.keepRootPath). */
  keepRootPath?: boolean;
  /** Phases as they start; during `capture`, the distinct contents (`files`) and their bytes read so far. */
  onProgress?: (p: { phase: string; files?: number; bytes?: number }) => void;
  /** Which objects the registry holds (default: every pack index, loaded now); a builder passes one it keeps across pushes. */
  catalog?: () => Promise<ObjectCatalog>;
}

export interface PushResult {
  env: Digest;
  layer: LayerRef;
  newObjects: number;
  newBytes: number;
  reusedObjects: number;
  packs: number;
}

export async function pushTree(reg: Registry, store: StorePaths, dir: string, opts: PushOptions = {}): Promise<PushResult> {
  if (opts.tag !== undefined) parseRefName(opts.tag);
  // named by our pid and start time: whoever finds it after we were killed removes it (store/leftovers.ts)
  const work = join(store.tmpDir, ownedName('push-', randomBytes(6).toString('hex')));
  await mkdir(work, { recursive: true });
  try {
    opts.onProgress?.({ phase: 'catalog' });
    const catalog = await (opts.catalog?.() ?? loadCatalog(reg, store));
    const used = new Map<Digest, PackRef>();
    const writer = new PackWriter({ tempDir: work });
    let reused = 0;
    opts.onProgress?.({ phase: 'capture' });
    /** Distinct contents read so far and their bytes (uncompressed). */
    const captured = { objects: 0, bytes: 0 };
    const manifestPath = join(work, 'manifest.jsonl');
    let cap;
    let packs;
    try {
      cap = await captureLayer(dir, {
        manifestPath,
        overlayUpper: opts.overlayUpper ?? false,
        idShift: opts.idShift ?? 0,
        keepRootPath: opts.keepRootPath ?? false,
        onObject: async (o) => {
          captured.objects++;
          captured.bytes += o.size;
          opts.onProgress?.({ phase: 'capture', files: captured.objects, bytes: captured.bytes });
          const have = catalog.get(o.digest);
          if (have !== undefined) {
            used.set(have.pack, have);
            reused++;
            return;
          }
          await writer.add(o);
        },
      });
      packs = await writer.finish();
    } catch (e) {
      // the writer's compression threads would otherwise keep the process alive
      await writer.abort();
      throw e;
    }
    opts.onProgress?.({ phase: 'upload' });
    await publishPacks(reg, packs);
    for (const p of packs) used.set(p.pack, { pack: p.pack, index: p.index });
    const newBytes = packs.reduce((n, p) => n + p.packBytes, 0);
    const newObjects = packs.reduce((n, p) => n + p.objects, 0);
    const compressed = join(work, 'manifest.jsonl.zst');
    const m = await compressFile(manifestPath, compressed);
    await reg.putBlobFile(m.digest, compressed);
    const layer: LayerRef = {
      digest: cap.digest,
      manifest: m.digest,
      packs: [...used.values()].sort((a, b) => (a.pack < b.pack ? -1 : 1)),
      size: cap.size,
      entries: cap.entries,
      objects: cap.objects,
    };
    const parentConfig = opts.parent?.config;
    const env: EnvConfig = {
      mediaType: ENV_MEDIA_TYPE,
      layers: [...(parentConfig?.layers ?? []), layer],
      config: RuntimeConfigSchema.parse({ ...(parentConfig?.config ?? {}), ...(opts.config ?? {}) }),
    };
    // Reused packs were found in the catalog earlier; a registry gc may have removed an
    // unreferenced one since. Check before publishing anything that reaches them.
    for (const p of layer.packs) {
      if ((await reg.statBlob(p.pack)) === null || (await reg.statBlob(p.index)) === null) {
        throw new NotFoundError(`pack ${p.pack} vanished during the push (a concurrent gc?)`, 'run the push again');
      }
    }
    const envDigest = await putJsonBlob(reg, env);
    if (opts.tag !== undefined) await reg.putRef(opts.tag, envDigest);
    return { env: envDigest, layer, newObjects, newBytes, reusedObjects: reused, packs: packs.length };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
