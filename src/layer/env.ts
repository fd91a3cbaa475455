/**
 * An environment: an ordered list of layers (lowest first, OCI stacking) plus a runtime config.
 * Its digest is the sha256 of the canonical JSON of this document, stored as a registry blob.
 */
import { z } from 'zod';
import { DigestSchema } from '../cas/digest.js';

export const PackRefSchema = z.strictObject({
  /** The pack archive blob. */
  pack: DigestSchema,
  /** The blob listing object -> location in that pack. */
  index: DigestSchema,
});
export type PackRef = z.infer<typeof PackRefSchema>;

export const LayerRefSchema = z.strictObject({
  /** sha256 of the canonical (uncompressed) manifest: the layer's identity. */
  digest: DigestSchema,
  /** The registry blob holding the zstd-compressed manifest. */
  manifest: DigestSchema,
  /** Packs that together hold every object the layer references. */
  packs: z.array(PackRefSchema),
  /** Sum of file sizes (what an uncompressed image of this layer holds). */
  size: z.number().int().min(0),
  /** Number of manifest entries and of distinct objects. */
  entries: z.number().int().min(0),
  objects: z.number().int().min(0),
});
export type LayerRef = z.infer<typeof LayerRefSchema>;

export const RuntimeConfigSchema = z.strictObject({
  workdir: z.string().startsWith('/').default('/'),
  env: z.record(z.string(), z.string()).default({}),
  /** In-sandbox user; 0 is the sandbox's own (unprivileged on the host) root. */
  user: z.strictObject({ uid: z.number().int().min(0), gid: z.number().int().min(0) }).default({ uid: 0, gid: 0 }),
  hostname: z.string().default('sandbox'),
  /** Default test command for scoring, if the environment has one. */
  testCmd: z.string().optional(),
  labels: z.record(z.string(), z.string()).default({}),
  /** From an imported image's config (Entrypoint, Cmd): what `podman run IMAGE` would start. */
  entrypoint: z.array(z.string()).optional(),
  cmd: z.array(z.string()).optional(),
});
export type RuntimeConfig = z.infer<typeof RuntimeConfigSchema>;

/** One image layer an environment was converted from: its sizes as a container engine sees them. */
export const ImageLayerInfoSchema = z.strictObject({
  /** sha256 of the uncompressed layer tar (the image config's diff id). */
  diffId: DigestSchema,
  /** The blob as a registry stores it (compressed, or the plain tar of a docker-archive). */
  digest: DigestSchema,
  compressedSize: z.number().int().min(0),
  /** Bytes of the uncompressed tar. */
  size: z.number().int().min(0),
  /**
   * The directories the layer tar implies without an entry (image/implicit-parents.ts): a blob
   * of their paths, whose attributes an import takes from the layers below in its image.
   */
  implicitDirs: DigestSchema.optional(),
});
export type ImageLayerInfo = z.infer<typeof ImageLayerInfoSchema>;

/** Where an environment imported from a container image came from (audit compares against it). */
export const ImageInfoSchema = z.strictObject({
  /** The source as given, e.g. `docker://host/repo:tag`. */
  source: z.string(),
  /** sha256 of the image config: the image's identity whatever its compression or transport. */
  config: DigestSchema,
  /** The manifest's digest, when the source had one. */
  manifest: DigestSchema.optional(),
  layers: z.array(ImageLayerInfoSchema),
  /**
   * The version of the conversion rules that made the layers (image/layer-convert.ts); absent:
   * before implicit parent directories were made, whose layers a pull may refuse. An import
   * reuses only conversions of the current version.
   */
  converter: z.number().int().min(1).optional(),
});
export type ImageInfo = z.infer<typeof ImageInfoSchema>;

export const EnvConfigSchema = z.strictObject({
  mediaType: z.literal('application/vnd.minisandbox.env.v1+json'),
  layers: z.array(LayerRefSchema),
  config: RuntimeConfigSchema,
  /** Set when the environment was converted from a container image. */
  image: ImageInfoSchema.optional(),
});
export type EnvConfig = z.infer<typeof EnvConfigSchema>;
export const ENV_MEDIA_TYPE = 'application/vnd.minisandbox.env.v1+json' as const;
