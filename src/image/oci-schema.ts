/**
 * The container image formats read here, as zod schemas: OCI image manifests and indexes,
 * Docker schema 2 manifests and manifest lists, image configs, the OCI layout's index.json and
 * `docker save`'s manifest.json. Only the fields used are checked; unknown fields pass (images
 * in the wild carry many).
 */
import { z } from 'zod';
import { DigestSchema } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';

export const MEDIA = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
} as const;

export const DescriptorSchema = z.object({
  mediaType: z.string().optional(),
  digest: DigestSchema,
  size: z.number().int().min(0),
  platform: z.object({ architecture: z.string(), os: z.string(), variant: z.string().optional() }).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});
export type Descriptor = z.infer<typeof DescriptorSchema>;

export const ImageManifestSchema = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  config: DescriptorSchema,
  layers: z.array(DescriptorSchema),
});
export type ImageManifest = z.infer<typeof ImageManifestSchema>;

export const ImageIndexSchema = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  manifests: z.array(DescriptorSchema),
});
export type ImageIndex = z.infer<typeof ImageIndexSchema>;

export const ImageConfigSchema = z.object({
  architecture: z.string().optional(),
  os: z.string().optional(),
  config: z
    .object({
      Env: z.array(z.string()).nullish(),
      WorkingDir: z.string().nullish(),
      User: z.string().nullish(),
      Entrypoint: z.array(z.string()).nullish(),
      Cmd: z.array(z.string()).nullish(),
      Labels: z.record(z.string(), z.string()).nullish(),
    })
    .nullish(),
  rootfs: z.object({ type: z.string(), diff_ids: z.array(DigestSchema) }),
});
export type ImageConfig = z.infer<typeof ImageConfigSchema>;

/** `docker save` / `podman save --format docker-archive`: manifest.json. */
export const DockerArchiveManifestSchema = z.array(
  z.object({
    Config: z.string(),
    RepoTags: z.array(z.string()).nullish(),
    Layers: z.array(z.string()),
  }),
);

export const OciLayoutSchema = z.object({ imageLayoutVersion: z.string() });

export function parseJson<S extends z.ZodType>(bytes: Buffer | string, schema: S, what: string): z.infer<S> {
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString());
  } catch {
    throw new InvalidInputError(`${what} is not valid JSON`, 'the image source is corrupt');
  }
  const r = schema.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new InvalidInputError(`${what}: ${i?.path.join('.') ?? ''}: ${i?.message ?? 'invalid'}`, 'the image source is corrupt or in a format not supported');
  }
  return r.data;
}

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export function parsePlatform(s: string): Platform {
  const [os, architecture, variant] = s.split('/');
  if (os === undefined || os === '' || architecture === undefined || architecture === '') {
    throw new InvalidInputError(`platform ${JSON.stringify(s)} is not OS/ARCH[/VARIANT]`, 'e.g. --platform linux/amd64');
  }
  return variant === undefined ? { os, architecture } : { os, architecture, variant };
}

export function isIndex(mediaType: string | undefined, json: Record<string, unknown>): boolean {
  return mediaType === MEDIA.ociIndex || mediaType === MEDIA.dockerList || (mediaType === undefined && Array.isArray(json['manifests']));
}

/** The entry of an index for a platform, or a clear error naming those it has. */
export function pickPlatform(index: ImageIndex, p: Platform, what: string): Descriptor {
  const match = index.manifests.filter(
    (m) =>
      m.platform !== undefined &&
      m.platform.os === p.os &&
      m.platform.architecture === p.architecture &&
      (p.variant === undefined || m.platform.variant === p.variant),
  );
  // attestation manifests (platform unknown/unknown) are never images to run
  if (match.length > 0) return match[0]!;
  const has = index.manifests.map((m) =>
    m.platform === undefined
      ? '(no platform)'
      : `${m.platform.os}/${m.platform.architecture}${m.platform.variant === undefined ? '' : `/${m.platform.variant}`}`,
  );
  throw new InvalidInputError(
    `${what} has no image for platform ${p.os}/${p.architecture}${p.variant === undefined ? '' : `/${p.variant}`} (it has: ${has.join(', ') || 'none'})`,
    'choose one of those with --platform',
  );
}
