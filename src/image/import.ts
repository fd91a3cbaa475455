/**
 * Importing a container image: resolve it, convert each layer not converted before, then publish
 * the environment and only then its refs (nothing half-imported; a rerun resumes from the layers
 * already recorded).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { NotFoundError } from '../errors.js';
import { asDiskError } from '../util/disk-error.js';
import { ENV_MEDIA_TYPE, type EnvConfig, EnvConfigSchema, type ImageLayerInfo, type LayerRef, RuntimeConfigSchema } from '../layer/env.js';
import { putJsonBlob, readJsonBlob } from '../registry/blobs.js';
import type { Registry } from '../registry/registry.js';
import { parseRefName } from '../cas/ref-name.js';
import { loadCatalog, type ObjectCatalog } from '../store/catalog.js';
import type { StorePaths } from '../store/paths.js';
import { runtimeFromImage } from './config.js';
import { findDiffId, imageRefName, recordDiffId } from './diffid-map.js';
import { CONVERTER_VERSION, convertLayer } from './layer-convert.js';
import { stackImplicitParents } from './implicit-parents.js';
import { parsePlatform } from './oci-schema.js';
import { parseSourceRef } from './reference.js';
import { RegistrySource, type RegistryClientOptions } from './registry-client.js';
import { DockerArchiveSource, type ImageSource, OciArchiveSource, OciLayoutSource } from './source.js';

export interface ImportImageOptions extends RegistryClientOptions {
  tag?: string;
  /** OS/ARCH[/VARIANT] picked from manifest lists and indexes (default linux/amd64). */
  platform?: string;
  /** Layers downloaded and converted at once (default 3). */
  jobs?: number;
  onProgress?: (p: { phase: string; layer?: string; bytes?: number; message?: string }) => void;
  /** Which objects the registry holds (default: every pack index, loaded once). */
  catalog?: () => Promise<ObjectCatalog>;
}

export interface ImportImageResult {
  source: string;
  env: Digest;
  config: Digest;
  manifest?: Digest;
  /** `present`: the image was imported before, nothing was fetched. */
  status: 'imported' | 'present';
  layers: Array<{ diffId: Digest; layer: Digest; converted: boolean; compressedSize: number; size: number }>;
  /** Bytes of layer blobs read from the source. */
  fetchedBytes: number;
  newObjects: number;
  reusedObjects: number;
}

export function openImageSource(text: string, opts: RegistryClientOptions = {}): ImageSource {
  const r = parseSourceRef(text);
  switch (r.kind) {
    case 'docker':
      return new RegistrySource(r, opts);
    case 'oci':
      return new OciLayoutSource(text, r.path, r.tag);
    case 'oci-archive':
      return new OciArchiveSource(text, r.path, r.tag);
    case 'docker-archive':
      return new DockerArchiveSource(text, r.path, r.tag);
  }
}

export async function importImage(reg: Registry, store: StorePaths, text: string, opts: ImportImageOptions = {}): Promise<ImportImageResult> {
  if (opts.tag !== undefined) parseRefName(opts.tag);
  const progress = opts.onProgress ?? (() => undefined);
  const source = openImageSource(text, opts);
  progress({ phase: 'resolve', message: `resolving ${text}` });
  const img = await source.resolve(parsePlatform(opts.platform ?? 'linux/amd64'));
  const base = { source: text, config: img.configDigest, ...(img.manifest === undefined ? {} : { manifest: img.manifest }) };

  // An image converted before (whatever its source or compression: the config names its content)
  const known = await reg.getRef(imageRefName(img.configDigest));
  const knownEnv = known !== null && (await reg.statBlob(known)) !== null ? await readJsonBlob(reg, known, EnvConfigSchema, 'environment config') : undefined;
  // converted by older rules (which a pull may refuse), it is converted again
  if (known !== null && knownEnv !== undefined && knownEnv.image?.converter === CONVERTER_VERSION) {
    const env = knownEnv;
    if (opts.tag !== undefined) await reg.putRef(opts.tag, known);
    return {
      ...base,
      env: known,
      status: 'present',
      layers: env.layers.map((l, i) => ({
        diffId: env.image?.layers[i]?.diffId ?? img.layers[i]!.diffId,
        layer: l.digest,
        converted: false,
        compressedSize: env.image?.layers[i]?.compressedSize ?? 0,
        size: env.image?.layers[i]?.size ?? 0,
      })),
      fetchedBytes: 0,
      newObjects: 0,
      reusedObjects: 0,
    };
  }

  let catalogP: Promise<ObjectCatalog> | undefined;
  const catalog = (): Promise<ObjectCatalog> => (catalogP ??= opts.catalog?.() ?? loadCatalog(reg, store));
  let fetchedBytes = 0;
  let newObjects = 0;
  let reusedObjects = 0;
  interface Done {
    layer: LayerRef;
    info: ImageLayerInfo;
    converted: boolean;
    what: string;
    passwd?: string;
    group?: string;
  }
  // one conversion per diff id, even when an image repeats a layer (empty layers often do)
  const byDiff = new Map<Digest, Promise<Done>>();
  const convertOne = async (i: number): Promise<Done> => {
    const l = img.layers[i]!;
    const what = `layer ${i + 1}/${img.layers.length} (${l.diffId.slice(7, 19)}) of ${text}`;
    const hit = await findDiffId(reg, l.diffId);
    if (hit !== null) {
      progress({ phase: 'layer', layer: l.diffId, message: `${what}: converted before` });
      return { layer: hit.layer, info: hit.info, converted: false, what, ...hit.files };
    }
    progress({ phase: 'layer', layer: l.diffId, message: `${what}: converting` });
    const work = join(store.tmpDir, `image-${process.pid}-${randomBytes(6).toString('hex')}`);
    try {
      const r = await convertLayer(reg, l.open(), {
        workDir: work,
        catalog: await catalog(),
        ...(l.digest === undefined ? {} : { expectDigest: l.digest }),
        expectDiffId: l.diffId,
        what,
        onBytes: (n) => (fetchedBytes += n),
      });
      newObjects += r.newObjects;
      reusedObjects += r.reusedObjects;
      const info: ImageLayerInfo = {
        diffId: r.diffId,
        digest: r.digest,
        compressedSize: l.size ?? r.compressedSize,
        size: r.size,
        ...(r.implicitDirs === undefined ? {} : { implicitDirs: r.implicitDirs }),
      };
      const files = { ...(r.passwd === undefined ? {} : { passwd: r.passwd }), ...(r.group === undefined ? {} : { group: r.group }) };
      await recordDiffId(reg, r.layer, info, files);
      return { layer: r.layer, info, converted: true, what, ...files };
    } catch (e) {
      // a full disk under the work dir is the store's (the registry names its own)
      throw asDiskError(e, "the store's", work);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  };
  const results: Array<Promise<Done>> = [];
  const jobs = Math.max(1, opts.jobs ?? 3);
  let running = 0;
  const waiters: Array<() => void> = [];
  const limited = async (i: number): Promise<Done> => {
    while (running >= jobs) await new Promise<void>((r) => waiters.push(r));
    running++;
    try {
      return await convertOne(i);
    } finally {
      running--;
      waiters.shift()?.();
    }
  };
  for (let i = 0; i < img.layers.length; i++) {
    const d = img.layers[i]!.diffId;
    let p = byDiff.get(d);
    if (p === undefined) {
      p = limited(i);
      byDiff.set(d, p);
    }
    results.push(p);
  }
  // every layer settles before failing, so none is left converting behind a thrown error
  const settled = await Promise.allSettled(results);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  const done = settled.map((s) => (s as PromiseFulfilledResult<Done>).value);

  let passwd: string | undefined;
  let group: string | undefined;
  for (const d of done) {
    passwd = d.passwd ?? passwd;
    group = d.group ?? group;
  }
  // the directories layers imply take the attributes below them in this image (variants where they differ)
  const stackDir = join(store.tmpDir, `image-${process.pid}-${randomBytes(6).toString('hex')}`);
  let layers: LayerRef[] = done.map((d) => d.layer);
  if (done.some((d) => d.info.implicitDirs !== undefined))
    try {
      await mkdir(stackDir, { recursive: true });
      layers = await stackImplicitParents(
        reg,
        stackDir,
        done.map((d) => ({ layer: d.layer, what: d.what, ...(d.info.implicitDirs === undefined ? {} : { implicitDirs: d.info.implicitDirs }) })),
      );
    } catch (e) {
      throw asDiskError(e, "the store's", stackDir);
    } finally {
      await rm(stackDir, { recursive: true, force: true });
    }
  const env: EnvConfig = {
    mediaType: ENV_MEDIA_TYPE,
    layers,
    config: RuntimeConfigSchema.parse(
      runtimeFromImage(img.config, { ...(passwd === undefined ? {} : { passwd }), ...(group === undefined ? {} : { group }) }, text),
    ),
    image: { ...base, layers: done.map((d) => d.info), converter: CONVERTER_VERSION },
  };
  // reused layers were found earlier; a registry gc may have removed their packs since
  for (const l of env.layers)
    for (const p of l.packs)
      if ((await reg.statBlob(p.pack)) === null)
        throw new NotFoundError(`pack ${p.pack} of layer ${l.digest}`, 'a gc removed it meanwhile; run the import again');
  const envDigest = await putJsonBlob(reg, env);
  await reg.putRef(imageRefName(img.configDigest), envDigest);
  if (opts.tag !== undefined) await reg.putRef(opts.tag, envDigest);
  progress({ phase: 'done', message: `${text} -> ${envDigest}` });
  return {
    ...base,
    env: envDigest,
    status: 'imported',
    layers: done.map((d, i) => ({
      diffId: d.info.diffId,
      layer: layers[i]!.digest,
      converted: d.converted,
      compressedSize: d.info.compressedSize,
      size: d.info.size,
    })),
    fetchedBytes,
    newObjects,
    reusedObjects,
  };
}
