/**
 * The layer manifest: one canonical JSON line per entry, sorted byte-wise by path.
 * A layer's digest is the sha256 of these canonical bytes (uncompressed), so the same tree
 * captured twice gives the same digest whatever compressor stores the manifest.
 */
import { z } from 'zod';
import { DIGEST_RE, DigestSchema, sha256 } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { checkRelativePath, comparePaths } from './path.js';

/** Nanoseconds since the epoch, as a decimal integer string (JSON numbers cannot hold them). */
export const MtimeSchema = z.string().regex(/^-?\d{1,30}$/, 'expected integer nanoseconds as a string');

/** Standard base64 with padding, as Buffer#toString('base64') writes it (a lenient decoder would take anything). */
const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

const Common = {
  /** Relative path, `/`-separated, encoded by layer/path.ts. */
  path: z.string().min(1),
  /** Permission bits including setuid, setgid and sticky (mode & 0o7777). */
  mode: z.number().int().min(0).max(0o7777),
  uid: z.number().int().min(0).max(0xffffffff),
  gid: z.number().int().min(0).max(0xffffffff),
  mtime: MtimeSchema,
  /** Extended attributes, name -> base64 value (standard, padded), excluding overlayfs' own (see `opaque`, whiteout). */
  xattrs: z.record(z.string(), z.string().regex(BASE64_RE, 'expected base64')).optional(),
};

export const FileEntrySchema = z.strictObject({
  type: z.literal('file'),
  ...Common,
  size: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  digest: DigestSchema,
});
export const DirEntrySchema = z.strictObject({
  type: z.literal('dir'),
  ...Common,
  /** Opaque directory: hides everything below it in lower layers. */
  opaque: z.literal(true).optional(),
});
export const SymlinkEntrySchema = z.strictObject({
  type: z.literal('symlink'),
  ...Common,
  /** Link target, encoded like a path; may be absolute, dangling or contain `..`: never followed. */
  target: z.string().min(1),
});
/** Second and later names of a hardlink group; `target` is the path of the group's `file` entry. */
export const HardlinkEntrySchema = z.strictObject({
  type: z.literal('hardlink'),
  path: z.string().min(1),
  target: z.string().min(1),
});
export const FifoEntrySchema = z.strictObject({ type: z.literal('fifo'), ...Common });
export const DeviceEntrySchema = z.strictObject({
  type: z.enum(['char', 'block']),
  ...Common,
  /** Device numbers as makedev takes them. */
  major: z.number().int().min(0).max(0xffffffff),
  minor: z.number().int().min(0).max(0xffffffff),
});
/** A deletion: the path is removed from lower layers when stacking. */
export const WhiteoutEntrySchema = z.strictObject({ type: z.literal('whiteout'), path: z.string().min(1) });

export const EntrySchema = z.discriminatedUnion('type', [
  FileEntrySchema,
  DirEntrySchema,
  SymlinkEntrySchema,
  HardlinkEntrySchema,
  FifoEntrySchema,
  DeviceEntrySchema,
  WhiteoutEntrySchema,
]);
export type Entry = z.infer<typeof EntrySchema>;
export type FileEntry = z.infer<typeof FileEntrySchema>;
export type DirEntry = z.infer<typeof DirEntrySchema>;
export type SymlinkEntry = z.infer<typeof SymlinkEntrySchema>;
export type HardlinkEntry = z.infer<typeof HardlinkEntrySchema>;
export type DeviceEntry = z.infer<typeof DeviceEntrySchema>;
export type WhiteoutEntry = z.infer<typeof WhiteoutEntrySchema>;

/** First line of a manifest. */
export const ManifestHeaderSchema = z.strictObject({
  mediaType: z.literal('application/vnd.minisandbox.layer.v1+jsonl'),
});
export const MANIFEST_HEADER = { mediaType: 'application/vnd.minisandbox.layer.v1+jsonl' } as const;

export function entryLine(e: Entry): string {
  return `${canonicalJson(e)}\n`;
}

/**
 * Validates one manifest line in context: schema, safe path, strict byte-wise order (which also
 * rejects duplicates). Pure, so capture, push and lay-out share one set of rules.
 */
export function parseEntryLine(line: string, lineNo: number, prevPath: string | undefined, source: string): Entry {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    throw new InvalidInputError(`${source}: line ${lineNo}: not valid JSON`);
  }
  let e = fastEntry(json);
  if (e === undefined) {
    const r = EntrySchema.safeParse(json);
    if (!r.success) {
      const issue = r.error.issues[0];
      throw new InvalidInputError(`${source}: line ${lineNo}: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid entry'}`);
    }
    e = r.data;
  }
  checkPath(e.path);
  if (e.type === 'hardlink') checkPath(e.target);
  if (prevPath !== undefined && comparePathStrings(prevPath, e.path) >= 0) {
    throw new InvalidInputError(`${source}: line ${lineNo}: entry ${JSON.stringify(e.path)} is out of order or duplicated`);
  }
  return e;
}

/*
 * A hand-written check of the common, plain entries, equivalent to EntrySchema (which stays the
 * definition and handles everything else, with its messages): about 70 us less per entry, which
 * was most of a small-file lay-out's parsing. It only ever accepts what EntrySchema accepts
 * (a test compares both on generated and mutated entries); anything unusual (xattrs, unknown
 * shapes, odd numbers) goes to zod. Returns the parsed object itself: its keys are exactly the
 * schema's.
 */
const MTIME_RE = /^-?\d{1,30}$/;

function isCount(v: unknown, max: number): boolean {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= max;
}

function isName(v: unknown): boolean {
  return typeof v === 'string' && v.length > 0;
}

/** path, mode, uid, gid, mtime (the Common fields) and the key count; `xattrs` is left to zod. */
function commonOk(o: Record<string, unknown>, keys: number): boolean {
  return (
    Object.keys(o).length === keys &&
    isName(o.path) &&
    isCount(o.mode, 0o7777) &&
    isCount(o.uid, 0xffffffff) &&
    isCount(o.gid, 0xffffffff) &&
    typeof o.mtime === 'string' &&
    MTIME_RE.test(o.mtime)
  );
}

export function fastEntry(json: unknown): Entry | undefined {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return undefined;
  const o = json as Record<string, unknown>;
  switch (o.type) {
    case 'file':
      return commonOk(o, 8) && isCount(o.size, Number.MAX_SAFE_INTEGER) && typeof o.digest === 'string' && DIGEST_RE.test(o.digest) ? (o as Entry) : undefined;
    case 'dir':
      return commonOk(o, o.opaque === true ? 7 : 6) ? (o as Entry) : undefined;
    case 'symlink':
      return commonOk(o, 7) && isName(o.target) ? (o as Entry) : undefined;
    case 'fifo':
      return commonOk(o, 6) ? (o as Entry) : undefined;
    case 'char':
    case 'block':
      return commonOk(o, 8) && isCount(o.major, 0xffffffff) && isCount(o.minor, 0xffffffff) ? (o as Entry) : undefined;
    case 'hardlink':
      return Object.keys(o).length === 3 && isName(o.path) && isName(o.target) ? (o as Entry) : undefined;
    case 'whiteout':
      return Object.keys(o).length === 2 && isName(o.path) ? (o as Entry) : undefined;
    default:
      return undefined;
  }
}

/** checkRelativePath without decoding, for paths with no escapes (the same rules on the same bytes). */
function checkPath(p: string): void {
  if (p.includes('\\') || p.length === 0 || p.charCodeAt(0) === 0x2f || p.includes('\0')) {
    checkRelativePath(p);
    return;
  }
  // components: no empty, `.` or `..` one; plain UTF-8 maps `/` and `.` to themselves
  let start = 0;
  for (let i = 0; i <= p.length; i++) {
    if (i === p.length || p.charCodeAt(i) === 0x2f) {
      const len = i - start;
      if (len === 0 || (len === 1 && p.charCodeAt(start) === 0x2e) || (len === 2 && p.charCodeAt(start) === 0x2e && p.charCodeAt(start + 1) === 0x2e)) {
        checkRelativePath(p); // throws, with its message
        return;
      }
      start = i + 1;
    }
  }
}

/**
 * comparePaths without decoding when it gives the same answer: strings with no escapes compare
 * as their UTF-8 bytes do, code unit by code unit, up to the first surrogate.
 */
function comparePathStrings(a: string, b: string): number {
  if (a.includes('\\') || b.includes('\\')) return comparePaths(a, b);
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 || y >= 0xd800) return comparePaths(a, b);
    return x - y;
  }
  return a.length - b.length;
}

/** Digest of a manifest held in memory (tests, small layers). Streaming writers hash as they go. */
export function manifestDigest(entries: readonly Entry[]): string {
  return sha256(serializeManifest(entries));
}

export function serializeManifest(entries: readonly Entry[]): string {
  return `${canonicalJson(MANIFEST_HEADER)}\n${entries.map(entryLine).join('')}`;
}
