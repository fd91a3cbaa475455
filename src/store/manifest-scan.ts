/**
 * The contents a manifest names, found without parsing it: in canonical form every `file` line,
 * and no other, starts with `{"digest":"sha256:<hex>"` (keys are sorted). Used only to decide
 * what to fetch before the lay-out, whose validating reader rejects anything non-canonical
 * before the layer becomes visible; a line this scan misreads can at worst fetch a verified
 * object for nothing or leave one unfetched, which the lay-out then reports.
 * A full validating pass here cost as much as the rest of a small-file lay-out (measured).
 */
import { createReadStream } from 'node:fs';

const PREFIX = Buffer.from('{"digest":"sha256:');
const HEX_LEN = 64;

export interface ManifestContents {
  /** Every content (64 hex digits) a file entry names. */
  unique: Set<string>;
  /** Those named by more than one file entry. */
  repeated: Set<string>;
}

export async function scanFileDigests(manifestPath: string): Promise<ManifestContents> {
  const unique = new Set<string>();
  const repeated = new Set<string>();
  let rest: Buffer | undefined;
  for await (const chunk of createReadStream(manifestPath, { highWaterMark: 1 << 20 })) {
    const buf: Buffer = rest === undefined ? (chunk as Buffer) : Buffer.concat([rest, chunk as Buffer]);
    let start = 0;
    for (let nl = buf.indexOf(0x0a, start); nl >= 0; nl = buf.indexOf(0x0a, start)) {
      const hex = lineDigest(buf, start, nl);
      if (hex !== undefined) {
        if (unique.has(hex)) repeated.add(hex);
        else unique.add(hex);
      }
      start = nl + 1;
    }
    rest = start < buf.length ? Buffer.from(buf.subarray(start)) : undefined;
  }
  return { unique, repeated };
}

function lineDigest(buf: Buffer, start: number, end: number): string | undefined {
  const at = start + PREFIX.length;
  if (end < at + HEX_LEN + 1 || buf[at + HEX_LEN] !== 0x22 || buf.compare(PREFIX, 0, PREFIX.length, start, at) !== 0) return undefined;
  for (let i = at; i < at + HEX_LEN; i++) {
    const c = buf[i]!;
    if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) return undefined;
  }
  return buf.toString('latin1', at, at + HEX_LEN);
}
