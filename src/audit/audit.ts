/**
 * `audit`: what the registry saves against one container image per ref.
 *
 * - logicalBytes: an image per ref holds every file of every layer of its environment;
 * - dockerStyleBytes: a store sharing only identical layers (Docker/OCI) holds each distinct layer once;
 * - uniqueContentBytes: each distinct file content once (what content addressing can reach);
 * - registryBytes: what the registry really holds (compressed packs, manifests, indexes, configs);
 *   reachedRegistryBytes: the part the tags reach.
 * All byte figures are uncompressed file bytes except the registry's and the images' compressed ones:
 * the report compares like with like (uncompressed with uncompressed, compressed with compressed).
 * Build cache refs (`_cache/...`) are never counted as images.
 */
import { pipeline, Readable } from 'node:stream';
import { z } from 'zod';
import { type Digest, verifyDigest } from '../cas/digest.js';
import { readManifest } from '../layer/manifest-read.js';
import type { EnvConfig } from '../layer/env.js';
import { envClosure } from '../registry/closure.js';
import type { Registry } from '../registry/registry.js';
import { DecompressStream } from 'zstd-napi';
import { DigestMismatchError, InvalidInputError, MinisandboxError } from '../errors.js';
import { HashTap, MAX_MANIFEST_BYTES } from '../store/zstdfile.js';

export const AuditRefSchema = z.object({
  ref: z.string(),
  /** The ref's first part (`dataset/instance` -> `dataset`): the per-dataset totals group by it. */
  dataset: z.string(),
  env: z.string(),
  layers: z.number(),
  files: z.number(),
  logicalBytes: z.number(),
  /** For refs imported from a container image: the image's layers as a registry stores them (what a pull downloads). */
  imageCompressedBytes: z.number().optional(),
  /** ... and uncompressed (the layer tars a container engine keeps on disk). */
  imageBytes: z.number().optional(),
  /** False where a pull of this tag would fail: a blob it reaches is missing, or its config cannot be read. */
  pullable: z.boolean(),
  problem: z.string().optional(),
});

/** Storage after the first k refs, in the order listed: the audit's charts. */
export const AuditPointSchema = z.object({
  ref: z.string(),
  /** One uncompressed image per ref (nothing shared). */
  perTaskBytes: z.number(),
  /** Each distinct layer once, uncompressed (a container engine sharing identical layers). */
  layerSharedBytes: z.number(),
  /** Each distinct file content once, uncompressed (what a node's store holds: its pool). */
  uniqueContentBytes: z.number(),
  /** What the registry holds for these refs (every blob they reach, once), compressed. */
  registryBytes: z.number(),
  /** The source images' distinct layers, compressed (an image registry), over the refs so far imported from images. */
  imageRegistryBytes: z.number(),
  /** How many refs so far were imported from images. */
  imageRefs: z.number(),
});

/** One dataset's refs (those named `dataset/...`), and what each added instance costs. */
export const AuditDatasetSchema = z.object({
  dataset: z.string(),
  refs: z.number(),
  perTaskBytes: z.number(),
  /** Distinct file contents of its refs, uncompressed. */
  uniqueContentBytes: z.number(),
  /** Blobs its refs reach, compressed (a blob shared with another dataset counts in both). */
  registryBytes: z.number(),
  /** Median, over its refs after the first, of the registry bytes and per-task image bytes each added. */
  marginalRegistryBytes: z.number(),
  marginalPerTaskBytes: z.number(),
});

export const AuditReportSchema = z.object({
  registry: z.string(),
  refs: z.array(AuditRefSchema),
  /** Build cache entries (`_cache/...`), with --all: listed, never counted as images. */
  cacheRefs: z.array(z.object({ ref: z.string(), env: z.string().nullable() })),
  datasets: z.array(AuditDatasetSchema),
  totals: z.object({
    refs: z.number(),
    distinctLayers: z.number(),
    distinctObjects: z.number(),
    logicalBytes: z.number(),
    dockerStyleBytes: z.number(),
    uniqueContentBytes: z.number(),
    /** Every blob of the registry: the refs', the build cache's and unreached ones (until gc). */
    registryBytes: z.number(),
    /** The blobs the refs reach: what serving them takes. */
    reachedRegistryBytes: z.number(),
    /** registryBytes / logicalBytes */
    registryToLogical: z.number(),
    /** registryBytes / dockerStyleBytes */
    registryToDockerStyle: z.number(),
    /** uniqueContentBytes / logicalBytes: a node's store against per-task images, both uncompressed */
    uniqueToLogical: z.number(),
    /** Over refs imported from images: distinct image layers, compressed and uncompressed. */
    imageCompressedBytes: z.number(),
    imageBytes: z.number(),
    imageRefs: z.number(),
    /** Refs a pull would fail on. */
    unpullableRefs: z.number(),
  }),
  cumulative: z.array(AuditPointSchema),
});
export type AuditReport = z.infer<typeof AuditReportSchema>;

const ratio = (a: number, b: number): number => (b === 0 ? 0 : a / b);

/** Refs whose first part starts with `_` (the build cache, `_cache/...`) are bookkeeping, not images. */
export function isInternalRef(name: string): boolean {
  return name.startsWith('_');
}

function median(xs: number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** A verified layer manifest's file contents (digest -> size); bounded and verified like a pull's. */
async function layerObjects(reg: Registry, l: EnvConfig['layers'][number]): Promise<Map<Digest, number>> {
  const objects = new Map<Digest, number>();
  const blob = await reg.getBlob(l.manifest);
  verifyDigest(`manifest of layer ${l.digest}`, l.manifest, blob);
  // a hostile registry can neither blow up the audit nor pass off another manifest as this layer's
  const tap = new HashTap(MAX_MANIFEST_BYTES);
  const plain = pipeline(Readable.from([blob]), new DecompressStream(), tap, () => undefined);
  try {
    for await (const e of readManifest(plain, `layer ${l.digest}`)) {
      if (e.type === 'file') objects.set(e.digest, e.size);
    }
  } catch (e) {
    // The manifest reader names the layer itself; the decompressor and the size bound do not.
    if (e instanceof MinisandboxError && e.message.includes(l.digest)) throw e;
    throw new InvalidInputError(
      `manifest of layer ${l.digest}: ${(e as Error).message}`,
      'the registry content is corrupt or hostile; run `minisandbox verify`',
    );
  }
  const actual = tap.digest();
  if (actual !== l.digest) throw new DigestMismatchError(`manifest of layer ${l.digest}`, l.digest, actual);
  return objects;
}

/**
 * `includeInternal`: also list the build cache's refs (as `cacheRefs`; they are never images: the
 * per-task figures and the savings count tags only).
 */
export async function audit(reg: Registry, opts: { includeInternal?: boolean } = {}): Promise<AuditReport> {
  const refs: AuditReport['refs'] = [];
  const cacheRefs: AuditReport['cacheRefs'] = [];
  const layers = new Map<Digest, EnvConfig['layers'][number]>();
  const layerContents = new Map<Digest, Map<Digest, number>>();
  const objects = new Map<Digest, number>();
  const cumulative: AuditReport['cumulative'] = [];
  const reached = new Set<Digest>();
  const blobSize = new Map<Digest, number | null>();
  // distinct image layers by diff id: [compressed, uncompressed]
  const imageLayers = new Map<Digest, [number, number]>();
  let perTask = 0;
  let registrySoFar = 0;
  let uniqueSoFar = 0;
  let imageRefs = 0;
  const perDataset = new Map<
    string,
    { refs: number; perTask: number; objects: Set<Digest>; unique: number; blobs: Set<Digest>; bytes: number; added: number[]; addedPerTask: number[] }
  >();
  const statOnce = async (b: Digest): Promise<number | null> => {
    if (!blobSize.has(b)) blobSize.set(b, (await reg.statBlob(b))?.size ?? null);
    return blobSize.get(b) ?? null;
  };
  for await (const r of reg.listRefEntries()) {
    if (isInternalRef(r.name)) {
      if (opts.includeInternal) cacheRefs.push({ ref: r.name, env: r.digest });
      continue;
    }
    const dataset = r.name.includes('/') ? r.name.slice(0, r.name.indexOf('/')) : '';
    const d = perDataset.get(dataset) ?? { refs: 0, perTask: 0, objects: new Set(), unique: 0, blobs: new Set(), bytes: 0, added: [], addedPerTask: [] };
    perDataset.set(dataset, d);
    if (r.digest === null) {
      d.refs++;
      refs.push({ ref: r.name, dataset, env: '', layers: 0, files: 0, logicalBytes: 0, pullable: false, problem: r.broken });
      continue;
    }
    let closure: Awaited<ReturnType<typeof envClosure>>;
    try {
      closure = await envClosure(reg, r.digest);
    } catch (e) {
      d.refs++;
      refs.push({ ref: r.name, dataset, env: r.digest, layers: 0, files: 0, logicalBytes: 0, pullable: false, problem: (e as Error).message });
      continue;
    }
    const { config, blobs } = closure;
    let files = 0;
    let logical = 0;
    const row: AuditReport['refs'][number] = { ref: r.name, dataset, env: r.digest, layers: config.layers.length, files: 0, logicalBytes: 0, pullable: true };
    for (const l of config.layers) {
      layers.set(l.digest, l);
      logical += l.size;
      files += l.entries;
      let contents = layerContents.get(l.digest);
      if (contents === undefined) {
        try {
          contents = await layerObjects(reg, l);
        } catch (e) {
          // a missing manifest is a tag that would not pull; a forged one stops the audit (as a pull)
          if (!(e instanceof MinisandboxError && e.code === 'NOT_FOUND')) throw e;
          row.pullable = false;
          row.problem ??= `manifest of layer ${l.digest} is missing from the registry`;
          contents = new Map();
        }
        layerContents.set(l.digest, contents);
      }
      for (const [o, size] of contents) {
        if (!objects.has(o)) {
          objects.set(o, size);
          uniqueSoFar += size;
        }
        if (!d.objects.has(o)) {
          d.objects.add(o);
          d.unique += size;
        }
      }
    }
    if (config.image !== undefined) {
      imageRefs++;
      row.imageCompressedBytes = config.image.layers.reduce((a, l) => a + l.compressedSize, 0);
      row.imageBytes = config.image.layers.reduce((a, l) => a + l.size, 0);
      for (const l of config.image.layers) imageLayers.set(l.diffId, [l.compressedSize, l.size]);
    }
    row.files = files;
    row.logicalBytes = logical;
    let datasetAdded = 0;
    for (const b of blobs) {
      const size = await statOnce(b);
      if (size === null) {
        row.pullable = false;
        row.problem ??= `blob ${b} is missing from the registry`;
        continue;
      }
      if (!d.blobs.has(b)) {
        d.blobs.add(b);
        d.bytes += size;
        datasetAdded += size;
      }
      if (reached.has(b)) continue;
      reached.add(b);
      registrySoFar += size;
    }
    if (d.refs > 0) {
      d.added.push(datasetAdded);
      d.addedPerTask.push(logical);
    }
    d.refs++;
    d.perTask += logical;
    refs.push(row);
    perTask += logical;
    cumulative.push({
      ref: r.name,
      perTaskBytes: perTask,
      layerSharedBytes: [...layers.values()].reduce((a, l) => a + l.size, 0),
      uniqueContentBytes: uniqueSoFar,
      registryBytes: registrySoFar,
      imageRegistryBytes: [...imageLayers.values()].reduce((a, [c]) => a + c, 0),
      imageRefs,
    });
  }
  let registryBytes = 0;
  for await (const b of reg.listBlobs()) registryBytes += b.size;
  const logicalBytes = refs.reduce((s, r) => s + r.logicalBytes, 0);
  const dockerStyleBytes = [...layers.values()].reduce((s, l) => s + l.size, 0);
  const uniqueContentBytes = uniqueSoFar;
  return {
    registry: reg.url,
    refs,
    cacheRefs,
    datasets: [...perDataset].map(([dataset, d]) => ({
      dataset,
      refs: d.refs,
      perTaskBytes: d.perTask,
      uniqueContentBytes: d.unique,
      registryBytes: d.bytes,
      marginalRegistryBytes: median(d.added),
      marginalPerTaskBytes: median(d.addedPerTask),
    })),
    totals: {
      refs: refs.length,
      distinctLayers: layers.size,
      distinctObjects: objects.size,
      logicalBytes,
      dockerStyleBytes,
      uniqueContentBytes,
      registryBytes,
      reachedRegistryBytes: registrySoFar,
      registryToLogical: ratio(registryBytes, logicalBytes),
      registryToDockerStyle: ratio(registryBytes, dockerStyleBytes),
      uniqueToLogical: ratio(uniqueContentBytes, logicalBytes),
      imageCompressedBytes: [...imageLayers.values()].reduce((a, [c]) => a + c, 0),
      imageBytes: [...imageLayers.values()].reduce((a, [, u]) => a + u, 0),
      imageRefs,
      unpullableRefs: refs.filter((r) => !r.pullable).length,
    },
    cumulative,
  };
}
