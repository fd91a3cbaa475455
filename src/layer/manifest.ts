/**
 * The layer manifest: one canonical JSON line per entry, sorted byte-wise by path.
 * A layer's digest is the sha256 of these canonical bytes (uncompressed), so the same tree
 * captured twice gives the same digest whatever compressor stores the manifest.
 */
import { z } from 'zod';
import { DigestSchema, sha256 } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { checkRelativePath, comparePaths } from './path.js';

/** Nanoseconds since the epoch, as a decimal integer string (JSON numbers cannot hold them). */
export const MtimeSchema = z.string().regex(/^-?\d{1,30}$/, 'expected integer nanoseconds as a string');

const Common = {
  /** Relative path, `/`-separated, encoded by layer/path.ts. */
  path: z.string().min(1),
  /** Permission bits including setuid, setgid and sticky (mode & 0o7777). */
  mode: z.number().int().min(0).max(0o7777),
  uid: z.number().int().min(0).max(0xffffffff),
  gid: z.number().int().min(0).max(0xffffffff),
  mtime: MtimeSchema,
  /** Extended attributes, name -> base64 value, excluding overlayfs' own (see `opaque`, whiteout). */
  xattrs: z.record(z.string(), z.string()).optional(),
};

export const FileEntrySchema = z.strictObject({
  type: z.literal('file'),
  ...Common,
  size: z.number().int().min(0),
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
  major: z.number().int().min(0),
  minor: z.number().int().min(0),
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

/** JSON with object keys sorted recursively: the one canonical serialization. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const obj = v as Record<string, unknown>;
  const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

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
  const r = EntrySchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new InvalidInputError(`${source}: line ${lineNo}: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid entry'}`);
  }
  const e = r.data;
  checkRelativePath(e.path);
  if (e.type === 'hardlink') checkRelativePath(e.target);
  if (prevPath !== undefined && comparePaths(prevPath, e.path) >= 0) {
    throw new InvalidInputError(`${source}: line ${lineNo}: entry ${JSON.stringify(e.path)} is out of order or duplicated`);
  }
  return e;
}

/** Digest of a manifest held in memory (tests, small layers). Streaming writers hash as they go. */
export function manifestDigest(entries: readonly Entry[]): string {
  return sha256(serializeManifest(entries));
}

export function serializeManifest(entries: readonly Entry[]): string {
  return canonicalJson(MANIFEST_HEADER) + '\n' + entries.map(entryLine).join('');
}
