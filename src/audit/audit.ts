/**
 * `audit`: what the registry saves against one container image per ref.
 *
 * - logicalBytes: an image per ref holds every file of every layer of its environment;
 * - dockerStyleBytes: a store sharing only identical layers (Docker/OCI) holds each distinct layer once;
 * - uniqueContentBytes: each distinct file content once (what content addressing can reach);
 * - registryBytes: what the registry really holds (compressed packs, manifests, indexes, configs).
 * All byte figures are uncompressed file bytes except registryBytes.
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
  env: z.string(),
  layers: z.number(),
  files: z.number(),
  logicalBytes: z.number(),
  /** For refs imported from a container image: the image's layers as a registry stores them (what a pull downloads). */
  imageCompressedBytes: z.number().optional(),
  /** ... and uncompressed (the layer tars a container engine keeps on disk). */
  imageBytes: z.number().optional(),
});

/** Storage after the first k refs, in the order listed: the audit's chart. */
export const AuditPointSchema = z.object({
  ref: z.string(),
  /** One uncompressed image per ref (nothing shared). */
  perTaskBytes: z.number(),
  /** Each distinct layer once, uncompressed (a container engine sharing identical layers). */
  layerSharedBytes: z.number(),
  /** What the registry holds for these refs (every blob they reach, once). */
  registryBytes: z.number(),
  /** The source images' distinct layers, compressed (an image registry); refs not imported from images add their layers' size. */
  imageRegistryBytes: z.number(),
});

export const AuditReportSchema = z.object({
  registry: z.string(),
  refs: z.array(AuditRefSchema),
  totals: z.object({
    refs: z.number(),
    distinctLayers: z.number(),
    distinctObjects: z.number(),
    logicalBytes: z.number(),
    dockerStyleBytes: z.number(),
    uniqueContentBytes: z.number(),
    registryBytes: z.number(),
    /** registryBytes / logicalBytes */
    registryToLogical: z.number(),
    /** registryBytes / dockerStyleBytes */
    registryToDockerStyle: z.number(),
    /** uniqueContentBytes / logicalBytes */
    uniqueToLogical: z.number(),
    /** Over refs imported from images: distinct image layers, compressed and uncompressed. */
    imageCompressedBytes: z.number(),
    imageBytes: z.number(),
  }),
  cumulative: z.array(AuditPointSchema),
});
export type AuditReport = z.infer<typeof AuditReportSchema>;

const ratio = (a: number, b: number): number => (b === 0 ? 0 : a / b);

/** Refs whose first part starts with `_` (the build cache, `_cache/...`) are bookkeeping, not images. */
export function isInternalRef(name: string): boolean {
  return name.startsWith('_');
}

export async function audit(reg: Registry, opts: { includeInternal?: boolean } = {}): Promise<AuditReport> {
  const refs: AuditReport['refs'] = [];
  const layers = new Map<Digest, EnvConfig['layers'][number]>();
  const cumulative: AuditReport['cumulative'] = [];
  const reached = new Set<Digest>();
  const blobSize = new Map<Digest, number>();
  // distinct image layers by diff id: [compressed, uncompressed]
  const imageLayers = new Map<Digest, [number, number]>();
  const sharedLayers = new Map<string, number>();
  let perTask = 0;
  let registrySoFar = 0;
  const listed: Array<{ name: string; digest: Digest }> = [];
  for await (const r of reg.listRefs()) if (opts.includeInternal || !isInternalRef(r.name)) listed.push(r);
  for (const r of listed) {
    const { config, blobs } = await envClosure(reg, r.digest);
    let files = 0;
    let logical = 0;
    for (const l of config.layers) {
      layers.set(l.digest, l);
      logical += l.size;
      files += l.entries;
    }
    const row: AuditReport['refs'][number] = { ref: r.name, env: r.digest, layers: config.layers.length, files, logicalBytes: logical };
    if (config.image !== undefined) {
      row.imageCompressedBytes = config.image.layers.reduce((a, l) => a + l.compressedSize, 0);
      row.imageBytes = config.image.layers.reduce((a, l) => a + l.size, 0);
      for (const l of config.image.layers) imageLayers.set(l.diffId, [l.compressedSize, l.size]);
      for (const l of config.image.layers) sharedLayers.set(`image:${l.diffId}`, l.compressedSize);
    } else {
      for (const l of config.layers) sharedLayers.set(`layer:${l.digest}`, l.size);
    }
    refs.push(row);
    for (const b of blobs) {
      if (reached.has(b)) continue;
      reached.add(b);
      let size = blobSize.get(b);
      if (size === undefined) {
        size = (await reg.statBlob(b))?.size ?? 0;
        blobSize.set(b, size);
      }
      registrySoFar += size;
    }
    perTask += logical;
    cumulative.push({
      ref: r.name,
      perTaskBytes: perTask,
      layerSharedBytes: [...layers.values()].reduce((a, l) => a + l.size, 0),
      registryBytes: registrySoFar,
      imageRegistryBytes: [...sharedLayers.values()].reduce((a, n) => a + n, 0),
    });
  }
  const objects = new Map<Digest, number>();
  for (const l of layers.values()) {
    const blob = await reg.getBlob(l.manifest);
    verifyDigest(`manifest of layer ${l.digest}`, l.manifest, blob);
    // Bounded and verified like a pull's: a hostile registry can neither blow up the audit nor
    // pass off another manifest as this layer's.
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
  }
  let registryBytes = 0;
  for await (const b of reg.listBlobs()) registryBytes += b.size;
  const logicalBytes = refs.reduce((s, r) => s + r.logicalBytes, 0);
  const dockerStyleBytes = [...layers.values()].reduce((s, l) => s + l.size, 0);
  const uniqueContentBytes = [...objects.values()].reduce((s, n) => s + n, 0);
  return {
    registry: reg.url,
    refs,
    totals: {
      refs: refs.length,
      distinctLayers: layers.size,
      distinctObjects: objects.size,
      logicalBytes,
      dockerStyleBytes,
      uniqueContentBytes,
      registryBytes,
      registryToLogical: ratio(registryBytes, logicalBytes),
      registryToDockerStyle: ratio(registryBytes, dockerStyleBytes),
      uniqueToLogical: ratio(uniqueContentBytes, logicalBytes),
      imageCompressedBytes: [...imageLayers.values()].reduce((a, [c]) => a + c, 0),
      imageBytes: [...imageLayers.values()].reduce((a, [, u]) => a + u, 0),
    },
    cumulative,
  };
}
