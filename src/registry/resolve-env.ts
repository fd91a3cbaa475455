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
  const digest = refOrDigest.startsWith('sha256:') ? parseDigest(refOrDigest) : await reg.getRef(parseRefName(refOrDigest));
  if (digest === null) throw new NotFoundError(`ref ${refOrDigest} in registry ${reg.url}`, 'list the refs with `minisandbox ls`');
  const config = await readJsonBlob(reg, digest, EnvConfigSchema, 'environment config');
  return { digest, config };
}
