/**
 * Where an image comes from: one interface over an OCI layout directory, an oci-archive, a
 * docker-archive and a registry. A source resolves the image for a platform to its config and
 * its layers' descriptors; layer bytes are opened only when a layer must be converted.
 */
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type Digest, digestHex, sha256 } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, NotFoundError } from '../errors.js';
import { ArchiveIndex } from './archive-index.js';
import {
  type Descriptor,
  DescriptorSchema,
  DockerArchiveManifestSchema,
  type ImageConfig,
  ImageConfigSchema,
  ImageIndexSchema,
  ImageManifestSchema,
  isIndex,
  parseJson,
  pickPlatform,
  type Platform,
} from './oci-schema.js';

export interface SourceLayer {
  /** The blob's digest, when the source names it (docker-archive layers are known by diff id only). */
  digest?: Digest;
  /** The blob's size, when known. */
  size?: number;
  diffId: Digest;
  /** The raw (possibly compressed) bytes. */
  open(): AsyncIterable<Buffer>;
}

export interface ResolvedImage {
  manifest?: Digest;
  configDigest: Digest;
  config: ImageConfig;
  layers: SourceLayer[];
}

export interface ImageSource {
  /** As the user named it. */
  readonly name: string;
  resolve(platform: Platform): Promise<ResolvedImage>;
}

/** Blob access common to OCI layouts (directory or archive) and registries. */
export interface BlobReader {
  /** A small blob, verified against its digest. */
  small(d: Descriptor): Promise<Buffer>;
  /** A manifest named by an index, verified (registries serve manifests apart from blobs; default: small). */
  manifest?(d: Descriptor): Promise<Buffer>;
  stream(d: Descriptor): AsyncIterable<Buffer>;
}

const MAX_META = 16 << 20;

export function verified(what: string, d: Digest, b: Buffer): Buffer {
  const actual = sha256(b);
  if (actual !== d) throw new DigestMismatchError(what, d, actual);
  return b;
}

/** From a manifest or index descriptor (with its bytes) to the image: index -> platform -> manifest -> config. */
export async function resolveFrom(reader: BlobReader, top: Descriptor, topBytes: Buffer, platform: Platform, what: string): Promise<ResolvedImage> {
  let desc = top;
  let bytes = topBytes;
  for (let depth = 0; ; depth++) {
    const json = parseJson(bytes, DescriptorlessSchema, what) as Record<string, unknown>;
    const mt = desc.mediaType ?? (typeof json['mediaType'] === 'string' ? json['mediaType'] : undefined);
    if (!isIndex(mt, json)) break;
    if (depth > 4) throw new InvalidInputError(`${what}: indexes nested too deep`);
    const index = parseJson(bytes, ImageIndexSchema, `${what} index`);
    desc = pickPlatform(index, platform, what);
    bytes = await (reader.manifest ?? reader.small).call(reader, desc);
  }
  const manifest = parseJson(bytes, ImageManifestSchema, `${what} manifest`);
  const configBytes = await reader.small(manifest.config);
  const config = parseJson(configBytes, ImageConfigSchema, `${what} config`);
  if (config.rootfs.diff_ids.length !== manifest.layers.length) {
    throw new InvalidInputError(
      `${what}: the manifest has ${manifest.layers.length} layers and the config ${config.rootfs.diff_ids.length} diff ids`,
      'the image is corrupt',
    );
  }
  return {
    manifest: desc.digest,
    configDigest: manifest.config.digest,
    config,
    layers: manifest.layers.map((l, i) => ({ digest: l.digest, size: l.size, diffId: config.rootfs.diff_ids[i]!, open: () => reader.stream(l) })),
  };
}

const DescriptorlessSchema = ImageIndexSchema.partial().passthrough();

/** `oci:DIR[:TAG]`: an OCI image layout directory. */
export class OciLayoutSource implements ImageSource {
  constructor(
    readonly name: string,
    private readonly dir: string,
    private readonly tag: string | undefined,
  ) {}

  async resolve(platform: Platform): Promise<ResolvedImage> {
    const st = await stat(join(this.dir, 'index.json')).catch(() => null);
    if (st === null) throw new NotFoundError(`OCI layout ${this.dir} (no index.json)`, 'give a directory written by `skopeo copy ... oci:DIR` or `umoci`');
    const indexBytes = await readFile(join(this.dir, 'index.json'));
    const reader: BlobReader = {
      small: async (d) => {
        if (d.size > MAX_META) throw new InvalidInputError(`${this.name}: metadata blob ${d.digest} is ${d.size} bytes`);
        const b = await readFile(join(this.dir, 'blobs', 'sha256', digestHex(d.digest))).catch(() => {
          throw new NotFoundError(`blob ${d.digest} in ${this.dir}`, 'the layout is incomplete; copy the image again');
        });
        return verified(`${this.name} blob`, d.digest, b);
      },
      stream: (d) => createReadStream(join(this.dir, 'blobs', 'sha256', digestHex(d.digest)), { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>,
    };
    return resolveLayoutIndex(reader, indexBytes, this.tag, platform, this.name);
  }
}

/** `oci-archive:FILE`: an OCI layout in a tar file, read in place. */
export class OciArchiveSource implements ImageSource {
  constructor(
    readonly name: string,
    private readonly file: string,
    private readonly tag: string | undefined,
  ) {}

  async resolve(platform: Platform): Promise<ResolvedImage> {
    const a = await ArchiveIndex.open(this.file);
    const reader: BlobReader = {
      small: async (d) => verified(`${this.name} blob`, d.digest, await a.read(`blobs/sha256/${digestHex(d.digest)}`, MAX_META)),
      stream: (d) => a.stream(`blobs/sha256/${digestHex(d.digest)}`),
    };
    return resolveLayoutIndex(reader, await a.read('index.json', MAX_META), this.tag, platform, this.name);
  }
}

/** The layout's index.json: the entry with the tag (annotation `org.opencontainers.image.ref.name`), or the only one. */
async function resolveLayoutIndex(reader: BlobReader, indexBytes: Buffer, tag: string | undefined, platform: Platform, what: string): Promise<ResolvedImage> {
  const index = parseJson(indexBytes, ImageIndexSchema, `${what} index.json`);
  const REF = 'org.opencontainers.image.ref.name';
  let pick: Descriptor[];
  if (tag !== undefined) {
    pick = index.manifests.filter((m) => {
      const r = m.annotations?.[REF];
      return r === tag || (r !== undefined && r.endsWith(`:${tag}`));
    });
    if (pick.length === 0)
      throw new NotFoundError(`tag ${tag} in ${what}`, `tags there: ${index.manifests.map((m) => m.annotations?.[REF] ?? '(none)').join(', ')}`);
  } else pick = index.manifests;
  if (pick.length !== 1) {
    // several entries without a tag: treat index.json itself as an index over platforms
    return resolveFrom(
      reader,
      { mediaType: index.mediaType ?? 'application/vnd.oci.image.index.v1+json', digest: sha256(indexBytes), size: indexBytes.length },
      indexBytes,
      platform,
      what,
    );
  }
  const d = DescriptorSchema.parse(pick[0]);
  return resolveFrom(reader, d, await reader.small(d), platform, what);
}

/** `docker-archive:FILE`: `docker save` / `podman save` output (manifest.json, config, layer tars). */
export class DockerArchiveSource implements ImageSource {
  constructor(
    readonly name: string,
    private readonly file: string,
    private readonly tag: string | undefined,
  ) {}

  async resolve(): Promise<ResolvedImage> {
    const a = await ArchiveIndex.open(this.file);
    const list = parseJson(await a.read('manifest.json', MAX_META), DockerArchiveManifestSchema, `${this.name} manifest.json`);
    let m = list[0];
    if (this.tag !== undefined) m = list.find((x) => x.RepoTags?.some((t) => t === this.tag || t.endsWith(`/${this.tag}`) || t.endsWith(`:${this.tag}`)));
    else if (list.length > 1) throw new InvalidInputError(`${this.name} holds ${list.length} images`, 'name one: docker-archive:FILE:REPO:TAG');
    if (m === undefined) throw new NotFoundError(`image ${this.tag ?? ''} in ${this.name}`);
    const configBytes = await a.read(m.Config, MAX_META);
    const config = parseJson(configBytes, ImageConfigSchema, `${this.name} config`);
    if (config.rootfs.diff_ids.length !== m.Layers.length)
      throw new InvalidInputError(`${this.name}: ${m.Layers.length} layer files for ${config.rootfs.diff_ids.length} diff ids`, 'the archive is corrupt');
    return {
      configDigest: sha256(configBytes),
      config,
      layers: m.Layers.map((l, i) => ({ diffId: config.rootfs.diff_ids[i]!, size: a.need(l).size, open: () => a.stream(l) })),
    };
  }
}
