/** Streaming zstd of whole files (manifests, indexes), hashing the stored bytes on the way. */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CompressStream, DecompressStream } from 'zstd-napi';
import type { Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError } from '../errors.js';

/** Decompressed manifests larger than this are refused (a zstd bomb in a hostile registry). */
export const MAX_MANIFEST_BYTES = 1 << 30;

/** Passes bytes through, hashing and counting them; past `limit` it fails the stream. */
export class HashTap extends Transform {
  readonly hash = createHash('sha256');
  bytes = 0;
  constructor(private readonly limit = Number.POSITIVE_INFINITY) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) {
      cb(new InvalidInputError(`decompressed data exceeds its limit of ${this.limit} bytes`));
      return;
    }
    this.hash.update(chunk);
    cb(null, chunk);
  }
  digest(): Digest {
    return `sha256:${this.hash.digest('hex')}`;
  }
}

/** Compresses `src` into `dest`; returns the digest and size of the compressed bytes. */
export async function compressFile(src: string, dest: string, level = 9): Promise<{ digest: Digest; size: number }> {
  const tap = new HashTap();
  await pipeline(createReadStream(src, { highWaterMark: 1 << 20 }), new CompressStream({ compressionLevel: level }), tap, createWriteStream(dest));
  return { digest: tap.digest(), size: tap.bytes };
}

/**
 * Decompresses a zstd stream into `dest`, verifying that the decompressed bytes hash to
 * `expected` (e.g. a layer digest) and bounding their size.
 */
export async function decompressVerified(src: NodeJS.ReadableStream, dest: string, expected: Digest, what: string, limit: number): Promise<number> {
  const tap = new HashTap(limit);
  try {
    await pipeline(src, new DecompressStream(), tap, createWriteStream(dest));
  } catch (e) {
    if (e instanceof InvalidInputError) throw new InvalidInputError(`${what}: ${e.message}`);
    throw new InvalidInputError(`${what}: not a valid zstd stream (${(e as Error).message})`, 'the registry content is corrupt; run `minisandbox verify`');
  }
  const actual = tap.digest();
  if (actual !== expected) throw new DigestMismatchError(what, expected, actual);
  return tap.bytes;
}
