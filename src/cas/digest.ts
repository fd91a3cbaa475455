import { createReadStream } from 'node:fs';
import { z } from 'zod';
import { DigestMismatchError, InvalidInputError } from '../errors.js';
import { nodeCrypto } from '../util/lazy-crypto.js';

/** `sha256:<64 lowercase hex>`: the only digest algorithm, spelled as OCI does. */
export const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
export const DigestSchema = z.string().regex(DIGEST_RE, 'expected sha256:<64 hex digits>');
export type Digest = z.infer<typeof DigestSchema>;

export function parseDigest(s: string): Digest {
  const r = DigestSchema.safeParse(s);
  if (!r.success) throw new InvalidInputError(`invalid digest ${JSON.stringify(s)}`, 'digests look like sha256:<64 hex digits>');
  return r.data;
}

/** The 64 hex digits of a digest, for file and key names. */
export function digestHex(d: Digest): string {
  return d.slice(7);
}

export function sha256(data: Uint8Array | string): Digest {
  // One-shot crypto.hash (Node >= 20.12) skips a Hash object per call: it matters per small file.
  const { hash, createHash } = nodeCrypto();
  return `sha256:${typeof hash === 'function' ? hash('sha256', data, 'hex') : createHash('sha256').update(data).digest('hex')}`;
}

export async function sha256File(path: string | Buffer): Promise<{ digest: Digest; size: number }> {
  const h = nodeCrypto().createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { digest: `sha256:${h.digest('hex')}`, size };
}

export function verifyDigest(what: string, expected: Digest, data: Uint8Array): void {
  const actual = sha256(data);
  if (actual !== expected) throw new DigestMismatchError(what, expected, actual);
}
