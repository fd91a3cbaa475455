/**
 * Git's index file (`.git/index`, versions 2 to 4) as far as its stat cache goes: where each
 * entry's stat fields sit, and the trailing checksum to recompute after they change. Read from
 * environments, so a registry may have made it hostile: any length or field that does not add
 * up makes parseGitIndex return undefined, never throw or read out of bounds.
 * (Format: git's Documentation/gitformat-index.txt.)
 */
import { createHash } from 'node:crypto';

export interface IndexEntry {
  /** Offset of the entry's first byte (its ctime). */
  offset: number;
  path: string;
  mode: number;
  /** What git saw when it last hashed the file. */
  mtimeSec: number;
  mtimeNsec: number;
  size: number;
}

export interface ParsedIndex {
  entries: IndexEntry[];
  hash: 'sha1' | 'sha256';
  /** An index that skips its checksum (index.skipHash): its trailer is zeros and stays so. */
  skipHash: boolean;
}

const HASH_BYTES = { sha1: 20, sha256: 32 } as const;
/** Stat fields before the object id: ctime, mtime (sec, nsec each), dev, ino, mode, uid, gid, size. */
const STAT_BYTES = 40;

function trailerMatches(buf: Buffer, hash: 'sha1' | 'sha256'): boolean {
  const n = HASH_BYTES[hash];
  if (buf.length < 12 + n) return false;
  return createHash(hash)
    .update(buf.subarray(0, buf.length - n))
    .digest()
    .equals(buf.subarray(buf.length - n));
}

/** Git's offset varint (v4 path prefixes): 7 bits a byte, each continuation adding one. */
function varint(buf: Buffer, at: number, end: number): [number, number] | undefined {
  if (at >= end) return undefined;
  let c = buf[at++]!;
  let v = c & 0x7f;
  while (c & 0x80) {
    if (at >= end || v > 0xffffff) return undefined;
    c = buf[at++]!;
    v = ((v + 1) << 7) | (c & 0x7f);
  }
  return [v, at];
}

export function parseGitIndex(buf: Buffer): ParsedIndex | undefined {
  if (buf.length < 12 || buf.toString('latin1', 0, 4) !== 'DIRC') return undefined;
  const version = buf.readUInt32BE(4);
  if (version < 2 || version > 4) return undefined;
  const count = buf.readUInt32BE(8);
  const sha1 = trailerMatches(buf, 'sha1');
  const sha256 = !sha1 && trailerMatches(buf, 'sha256');
  const zeros = !sha1 && !sha256 && buf.subarray(buf.length - 20).every((b) => b === 0);
  // a skipped hash does not say which object ids the entries hold: those of sha1 repositories, the usual
  const hash = sha256 ? 'sha256' : 'sha1';
  if (!sha1 && !sha256 && !zeros) return undefined;
  const end = buf.length - HASH_BYTES[hash];
  const fixed = STAT_BYTES + HASH_BYTES[hash] + 2;
  const entries: IndexEntry[] = [];
  let at = 12;
  let previous = '';
  for (let i = 0; i < count; i++) {
    if (at + fixed > end) return undefined;
    const flags = buf.readUInt16BE(at + STAT_BYTES + HASH_BYTES[hash]);
    const extended = (flags & 0x4000) !== 0;
    if (extended && version < 3) return undefined;
    const nameAt = at + fixed + (extended ? 2 : 0);
    let path: string;
    let next: number;
    if (version === 4) {
      const v = varint(buf, nameAt, end);
      if (v === undefined || v[0] > previous.length) return undefined;
      const nul = buf.indexOf(0, v[1]);
      if (nul < 0 || nul >= end) return undefined;
      path = previous.slice(0, previous.length - v[0]) + buf.toString('utf8', v[1], nul);
      next = nul + 1;
    } else {
      const nul = buf.indexOf(0, nameAt);
      if (nul < 0 || nul >= end) return undefined;
      path = buf.toString('utf8', nameAt, nul);
      // padded with 1 to 8 NULs to a multiple of 8 bytes
      next = at + ((nameAt - at + (nul - nameAt) + 8) & ~7);
      if (next > end) return undefined;
    }
    entries.push({
      offset: at,
      path,
      mode: buf.readUInt32BE(at + 24),
      mtimeSec: buf.readUInt32BE(at + 8),
      mtimeNsec: buf.readUInt32BE(at + 12),
      size: buf.readUInt32BE(at + 36),
    });
    previous = path;
    at = next;
  }
  // extensions: a split index ("link") keeps entries elsewhere: not ours to patch
  while (at + 8 <= end) {
    const sig = buf.toString('latin1', at, at + 4);
    const len = buf.readUInt32BE(at + 4);
    if (sig === 'link' || at + 8 + len > end) return undefined;
    at += 8 + len;
  }
  if (at !== end) return undefined;
  return { entries, hash, skipHash: zeros };
}

/** Stat fields as a file's lstat gives them (bigint: nanoseconds), written as git does (low 32 bits). */
export interface EntryStat {
  ctimeNs: bigint;
  ino: bigint;
  uid: number;
  gid: number;
}

/** Writes `stat` into the entry at `offset` of `buf` (a copy of the index). */
export function setEntryStat(buf: Buffer, offset: number, stat: EntryStat): void {
  buf.writeUInt32BE(Number((stat.ctimeNs / 1_000_000_000n) & 0xffffffffn), offset);
  buf.writeUInt32BE(Number(stat.ctimeNs % 1_000_000_000n), offset + 4);
  buf.writeUInt32BE(Number(stat.ino & 0xffffffffn), offset + 20);
  buf.writeUInt32BE(stat.uid >>> 0, offset + 28);
  buf.writeUInt32BE(stat.gid >>> 0, offset + 32);
}

/** The trailing checksum, recomputed after entries changed (unless the index skips it). */
export function resealIndex(buf: Buffer, parsed: ParsedIndex): void {
  if (parsed.skipHash) return;
  const n = HASH_BYTES[parsed.hash];
  createHash(parsed.hash)
    .update(buf.subarray(0, buf.length - n))
    .digest()
    .copy(buf, buf.length - n);
}
