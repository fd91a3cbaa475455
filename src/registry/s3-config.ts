/**
 * Where an S3 registry lives: `s3://bucket/prefix[?region=R&endpoint=URL&path-style]`, completed
 * from the standard AWS environment. Credentials are not parsed here: the SDK's default chain
 * (environment, shared profiles via AWS_PROFILE, SSO, instance metadata) resolves them.
 *
 * Precedence, highest first:
 *   endpoint    `?endpoint=` · AWS_ENDPOINT_URL_S3 · AWS_ENDPOINT_URL · AWS's own endpoint
 *   region      `?region=` · AWS_REGION · AWS_DEFAULT_REGION · the SDK's profile chain
 *   path style  `?path-style` (or `=1`/`=0`) · AWS_S3_FORCE_PATH_STYLE=1 · on when the endpoint
 *               host is an IP address or localhost (virtual-hosted names cannot resolve there)
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';

export const S3LocationSchema = z.strictObject({
  bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'S3 bucket names are 3-63 lowercase letters, digits, dots and hyphens'),
  /** Key prefix without leading or trailing slash; '' for the bucket root. */
  prefix: z
    .string()
    .refine((p) => p === '' || (!p.startsWith('/') && !p.endsWith('/') && !p.split('/').includes('..')), 'prefix must not start or end with / or contain ..'),
  endpoint: z.url().optional(),
  region: z.string().min(1).optional(),
  forcePathStyle: z.boolean(),
});
export type S3Location = z.infer<typeof S3LocationSchema>;

function truthy(v: string | null | undefined): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  return !/^(0|false|no|off)$/i.test(v);
}

export function hostNeedsPathStyle(endpoint: string | undefined): boolean {
  if (endpoint === undefined) return false;
  let host: string;
  try {
    host = new URL(endpoint).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return false; // the schema rejects the endpoint itself, with a better message
  }
  return isIP(host) !== 0 || host === 'localhost' || host.endsWith('.localhost');
}

export function parseS3Url(url: string, env: NodeJS.ProcessEnv = process.env): S3Location {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidInputError(`invalid S3 registry URL ${JSON.stringify(url)}`, 'write it as s3://bucket/prefix');
  }
  if (u.protocol !== 's3:') throw new InvalidInputError(`not an S3 URL: ${JSON.stringify(url)}`, 'write it as s3://bucket/prefix');
  // URL parsing would silently resolve `a/../b` to `b`: a prefix that is not what was written.
  if (
    (url.split(/[?#]/)[0] ?? '')
      .split('/')
      .slice(3)
      .some((seg) => seg === '..' || seg === '.')
  ) {
    throw new InvalidInputError(`S3 registry URL ${JSON.stringify(url)} has . or .. segments`, 'write the prefix without . and .. parts');
  }
  const q = u.searchParams;
  const endpoint = q.get('endpoint') ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL ?? undefined;
  const region = q.get('region') ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? undefined;
  const pathStyleParam = q.has('path-style') ? (truthy(q.get('path-style') || '1') ?? true) : undefined;
  const forcePathStyle = pathStyleParam ?? truthy(env.AWS_S3_FORCE_PATH_STYLE) ?? hostNeedsPathStyle(endpoint || undefined);
  const r = S3LocationSchema.safeParse({
    bucket: u.hostname,
    prefix: decodeURIComponent(u.pathname).replace(/^\/+|\/+$/g, ''),
    endpoint: endpoint || undefined,
    region: region || undefined,
    forcePathStyle,
  });
  if (!r.success) {
    throw new InvalidInputError(
      `invalid S3 registry URL ${JSON.stringify(url)}: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      'write it as s3://bucket/prefix[?region=R&endpoint=URL&path-style]',
    );
  }
  return r.data;
}

/** The canonical printable form (no secrets ever appear in it: credentials are never in the URL). */
export function formatS3Url(loc: S3Location): string {
  return `s3://${loc.bucket}${loc.prefix === '' ? '' : `/${loc.prefix}`}`;
}
