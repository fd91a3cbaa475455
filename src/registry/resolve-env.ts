/**
 * A ref or digest -> the environment it names (digest and verified config). Used by pull,
 * prefetch, builds and the CLI; it reads only the registry.
 */
import { type Digest, parseDigest } from '../cas/digest.js';
import { parseRefName } from '../cas/ref-name.js';
import { NotFoundError } from '../errors.js';
import { type EnvConfig, EnvConfigSchema } from '../layer/env.js';
import { readJsonBlob } from './blobs.js';
import type { Registry } from './registry.js';

export async function resolveEnv(reg: Registry, refOrDigest: string): Promise<{ digest: Digest; config: EnvConfig }> {
  const digest = await resolveEnvDigest(reg, refOrDigest);
  return { digest, config: await readEnvConfig(reg, digest) };
}

/** The digest a ref names in the registry (a digest names itself). */
export async function resolveEnvDigest(reg: Registry, refOrDigest: string): Promise<Digest> {
  const digest = refOrDigest.startsWith('sha256:') ? parseDigest(refOrDigest) : await reg.getRef(parseRefName(refOrDigest));
  if (digest === null) throw new NotFoundError(`ref ${refOrDigest} in registry ${reg.url}`, 'list the refs with `minisandbox ls`');
  return digest;
}

/** An environment's config, verified against its digest. */
export function readEnvConfig(reg: Registry, digest: Digest): Promise<EnvConfig> {
  return readJsonBlob(reg, digest, EnvConfigSchema, 'environment config');
}
