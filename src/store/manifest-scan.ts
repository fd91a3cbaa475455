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
const LINE_PREFIX = Buffer.concat([Buffer.from('\n'), PREFIX]);
const HEX_LEN = 64;
const HEX_RE = /^[0-9a-f]{64}$/;

export interface ManifestContents {
  /** Every content (64 hex digits) a file entry names. */
  unique: Set<string>;
  /** Those named by more than one file entry. */
  repeated: Set<string>;
  /**
   * No backslash anywhere (so no escapes in strings): a manifest the lay-out helper can read
   * itself (native/fsmeta-manifest.c), which checks it as node would.
   */
  plain: boolean;
}

export async function scanFileDigests(manifestPath: string): Promise<ManifestContents> {
  const unique = new Set<string>();
  const repeated = new Set<string>();
  let plain = true;
  let rest: Buffer | undefined;
  for await (const chunk of createReadStream(manifestPath, { highWaterMark: 1 << 20 })) {
    const buf: Buffer = rest === undefined ? (chunk as Buffer) : Buffer.concat([rest, chunk as Buffer]);
    if (plain && buf.includes(0x5c)) plain = false;
    // Every complete line; file lines found by a search for their start, not line by line (the
    // scan is on the way to a pull's first fetch, and a per-line loop in cold code cost 4 us a line).
    const end = buf.lastIndexOf(0x0a);
    const note = (at: number): void => {
      const hex = digestAt(buf, at);
      if (hex === undefined) return;
      if (unique.has(hex)) repeated.add(hex);
      else unique.add(hex);
    };
    if (end >= 0) {
      note(0);
      for (let nl = buf.indexOf(LINE_PREFIX); nl >= 0 && nl < end; nl = buf.indexOf(LINE_PREFIX, nl + 1)) note(nl + 1);
    }
    rest = end + 1 < buf.length ? Buffer.from(buf.subarray(end + 1)) : undefined;
  }
  return { unique, repeated, plain };
}

/** The content digest of the file line starting at `start` (hex), if it is one. */
function digestAt(buf: Buffer, start: number): string | undefined {
  const at = start + PREFIX.length;
  if (at + HEX_LEN >= buf.length || buf[at + HEX_LEN] !== 0x22 || buf.compare(PREFIX, 0, PREFIX.length, start, at) !== 0) return undefined;
  const hex = buf.toString('latin1', at, at + HEX_LEN);
  return HEX_RE.test(hex) ? hex : undefined;
}
