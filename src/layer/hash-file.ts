/** Reading and hashing one file: the one implementation behind capture-hash.ts and its workers. */
import { createHash, hash as oneShotHash } from 'node:crypto';
import { closeSync, readSync } from 'node:fs';
import { openFileAt } from '../util/fs-at.js';

export interface HashResult {
  /** 64 lowercase hex digits. */
  hex: string;
  /** Bytes actually read (the caller compares it with the size it saw in lstat). */
  size: number;
}

/**
 * Reads and hashes one file on the calling thread. A short read at the expected size is taken
 * as end of file, which saves the extra read() per file that would only return 0: for small
 * files the syscalls are the cost. A file that grew since lstat is caught later anyway, by the
 * pack writer, which verifies what it reads against this digest.
 *
 * `path` names one entry of a held directory (util/fs-at.ts): opened without following a symlink
 * or blocking on a FIFO, and read only if it is a regular file (the inode `ino`, when given).
 */
export function hashFileSync(path: Buffer | string, expected: number, buf: Buffer, ino?: bigint): HashResult {
  const fd = openFileAt(path, ino);
  try {
    const first = readSync(fd, buf, 0, buf.length, null);
    if (first < buf.length && first >= expected) return { hex: oneShot(buf.subarray(0, first)), size: first };
    const h = createHash('sha256');
    h.update(buf.subarray(0, first));
    let size = first;
    while (first > 0) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
      size += n;
      if (n < buf.length && size >= expected) break;
    }
    return { hex: h.digest('hex'), size };
  } finally {
    closeSync(fd);
  }
}

/** Whole small files are hashed in one call: half the per-file cost of a Hash object. */
function oneShot(data: Buffer): string {
  return typeof oneShotHash === 'function' ? oneShotHash('sha256', data, 'hex') : createHash('sha256').update(data).digest('hex');
}
