/**
 * Verified access to registry blobs: everything named by a digest is checked against it on
 * every read, so a corrupt or hostile registry is caught before its bytes are used.
 */
import type { z } from 'zod';
import { type Digest, sha256, verifyDigest } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { canonicalJson } from '../cas/canonical-json.js';
import type { Registry } from './registry.js';

export async function readVerifiedBlob(reg: Registry, digest: Digest, what: string): Promise<Buffer> {
  const data = await reg.getBlob(digest);
  verifyDigest(`${what} ${digest}`, digest, data);
  return data;
}

export async function readJsonBlob<S extends z.ZodType>(reg: Registry, digest: Digest, schema: S, what: string): Promise<z.infer<S>> {
  const data = await readVerifiedBlob(reg, digest, what);
  let json: unknown;
  try {
    json = JSON.parse(data.toString('utf8'));
  } catch {
    throw new InvalidInputError(`${what} ${digest} is not valid JSON`);
  }
  const r = schema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new InvalidInputError(`${what} ${digest}: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`);
  }
  return r.data;
}

/** Stores a JSON document canonically; its digest is its name. */
export async function putJsonBlob(reg: Registry, value: unknown): Promise<Digest> {
  const data = Buffer.from(canonicalJson(value), 'utf8');
  const digest = sha256(data);
  await reg.putBlob(digest, data);
  return digest;
}
