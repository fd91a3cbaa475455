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
import { readManifest } from '../layer/capture.js';
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
  }),
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
  for await (const r of reg.listRefs()) {
    if (!opts.includeInternal && isInternalRef(r.name)) continue;
    const { config } = await envClosure(reg, r.digest);
    let files = 0;
    let logical = 0;
    for (const l of config.layers) {
      layers.set(l.digest, l);
      logical += l.size;
      files += l.entries;
    }
    refs.push({ ref: r.name, env: r.digest, layers: config.layers.length, files, logicalBytes: logical });
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
      throw new InvalidInputError(`manifest of layer ${l.digest}: ${(e as Error).message}`, 'the registry content is corrupt or hostile; run `minisandbox verify`');
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
    },
  };
}
