/**
 * Tar headers for pack entries, encoded by tar-stream's own header encoder.
 *
 * Packs are laid out by hand (header, data, padding, end-of-archive) rather than through
 * tar-stream's `pack()` stream: that stream costs about 4x the header encoding per entry
 * (a streamx Writable per entry), which dominated packing of small files. The bytes are the same.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { digestHex, type Digest } from '../cas/digest.js';
import { MinisandboxError } from '../errors.js';
import { TAR_BLOCK } from './pack-index.js';

interface FileHeader {
  name: string;
  size: number;
  mode: number;
  mtime: Date;
  uid: number;
  gid: number;
  type: 'file';
}

interface HeaderCodec {
  encode(h: FileHeader): Buffer | null;
}

const require = createRequire(import.meta.url);
// tar-stream's package exports hide headers.js; load it next to the resolved entry point.
const codec = require(join(dirname(require.resolve('tar-stream')), 'headers.js')) as HeaderCodec;

/** Zero bytes for padding and the end-of-archive marker; never written to. */
export const ZEROS = Buffer.alloc(2 * TAR_BLOCK);

/** The 512-byte header of `objects/<hex>`, with fixed metadata so packs are reproducible. */
export function objectHeader(digest: Digest, size: number): Buffer {
  const h = codec.encode({ name: `objects/${digestHex(digest)}`, size, mode: 0o644, mtime: new Date(0), uid: 0, gid: 0, type: 'file' });
  if (!h || h.length !== TAR_BLOCK)
    throw new MinisandboxError('PACK_LAYOUT', `tar-stream could not encode a header for ${digest}`, { hint: 'this is a bug in minisandbox' });
  return h;
}

/** Padding after `size` bytes of data, up to the next block. */
export function padding(size: number): Buffer {
  const r = size % TAR_BLOCK;
  return r === 0 ? ZEROS.subarray(0, 0) : ZEROS.subarray(0, TAR_BLOCK - r);
}
