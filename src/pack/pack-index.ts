/**
 * The pack index blob: which objects a pack holds and where. Stored zstd-compressed; its digest is
 * the sha256 of the stored bytes, like every registry blob.
 *
 * Frames tile the pack exactly (first at 0, each starting where the previous ended, the last
 * ending at packSize), so a reader can trust byte ranges derived from it once validated.
 * Objects are sorted by digest, which makes the serialization canonical.
 */
import { z } from 'zod';
import { compress } from 'zstd-napi';
import { DIGEST_RE, DigestSchema, sha256, type Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError } from '../errors.js';
import { CorruptPackError } from './errors.js';
import { decompressBounded } from './zstd-bounded.js';

export const PACK_INDEX_FORMAT = 'minisandbox-pack-index/1';

/** Tar blocks: every entry is one 512-byte header plus its data padded to 512. */
export const TAR_BLOCK = 512;
/** Highest byte count any pack, frame or object may claim (1 PiB): rejects absurd values early. */
export const MAX_BYTES = 2 ** 50;
/** Highest object count in one index: bounds the memory a hostile index can make us spend. */
export const MAX_INDEX_OBJECTS = 4_000_000;
/** Highest decompressed index size accepted (zstd bomb defence). */
export const MAX_INDEX_BYTES = 256 << 20;

const Count = z.number().int().nonnegative().max(MAX_BYTES);

export const PackFrameSchema = z.object({
  /** Byte offset of the frame in the pack blob. */
  offset: Count,
  /** Compressed length of the frame. */
  length: Count.min(1),
  /** Length of the frame once decompressed: whole tar blocks. */
  rawLength: Count.min(TAR_BLOCK).multipleOf(TAR_BLOCK),
});
export type PackFrame = z.infer<typeof PackFrameSchema>;

export const PackObjectSchema = z.object({
  digest: DigestSchema,
  size: Count,
  /** Index into `frames`. */
  frame: z.number().int().nonnegative(),
  /** Offset of the object's data (after its tar header) in the decompressed frame. */
  offset: Count.min(TAR_BLOCK).multipleOf(TAR_BLOCK),
});
export type PackObject = z.infer<typeof PackObjectSchema>;

export const PackIndexFileSchema = z.object({
  format: z.literal(PACK_INDEX_FORMAT),
  pack: DigestSchema,
  packSize: Count,
  frames: z.array(PackFrameSchema).min(1),
  objects: z.array(PackObjectSchema).max(MAX_INDEX_OBJECTS),
});
export type PackIndexFile = z.infer<typeof PackIndexFileSchema>;

/**
 * One object located in a pack, self-contained so a puller can keep entries from many packs
 * and fetch any subset with `fetchObjects`.
 */
export const PackIndexEntrySchema = z.object({
  digest: DigestSchema,
  size: Count,
  frameOffset: Count,
  frameLength: Count.min(1),
  frameRawLength: Count.min(TAR_BLOCK).multipleOf(TAR_BLOCK),
  offset: Count.min(TAR_BLOCK).multipleOf(TAR_BLOCK),
});
export type PackIndexEntry = z.infer<typeof PackIndexEntrySchema>;

export interface PackIndex {
  pack: Digest;
  packSize: number;
  frames: PackFrame[];
  entries: PackIndexEntry[];
}

/** Bytes an object occupies in the tar stream: header plus data padded to a block. */
export function tarEntryLength(size: number): number {
  return TAR_BLOCK + Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;
}

/** Tar end-of-archive marker: two zero blocks. */
export const TAR_END_LENGTH = 2 * TAR_BLOCK;

/** Canonical JSON: fixed key order, objects sorted by digest, no whitespace. */
export function serializePackIndex(index: PackIndexFile): string {
  const frames = index.frames.map((f) => ({ offset: f.offset, length: f.length, rawLength: f.rawLength }));
  const objects = [...index.objects]
    .sort((a, b) => (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : 0))
    .map((o) => ({ digest: o.digest, size: o.size, frame: o.frame, offset: o.offset }));
  return JSON.stringify({ format: index.format, pack: index.pack, packSize: index.packSize, frames, objects });
}

/** The stored index blob and its digest. */
export function encodePackIndex(index: PackIndexFile): { bytes: Buffer; digest: Digest } {
  const bytes = compress(Buffer.from(serializePackIndex(index)), { compressionLevel: 9, checksumFlag: true });
  return { bytes, digest: sha256(bytes) };
}

/**
 * Verifies, decodes and validates a stored index blob. Everything later byte-range arithmetic
 * relies on is checked here, because the registry may be hostile.
 */
export function parsePackIndex(bytes: Buffer, indexDigest: Digest): PackIndex {
  const actual = sha256(bytes);
  if (actual !== indexDigest) throw new DigestMismatchError(`pack index ${indexDigest}`, indexDigest, actual);
  let json: unknown;
  try {
    json = JSON.parse(decompressBounded(bytes, MAX_INDEX_BYTES).toString('utf8'));
  } catch (e) {
    throw new CorruptPackError(`pack index ${indexDigest} does not decode: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  const fast = fastPackIndexFile(json);
  if (fast !== undefined) return validatePackIndex(fast, indexDigest);
  const r = PackIndexFileSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new InvalidInputError(
      `pack index ${indexDigest} is invalid at ${issue?.path.join('.') ?? '?'}: ${issue?.message ?? 'unknown'}`,
      'the registry holds a damaged or hostile index; re-push the pack',
    );
  }
  return validatePackIndex(r.data, indexDigest);
}

function isCount(v: unknown, min = 0): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= min && v <= MAX_BYTES;
}

function hasKeys(v: unknown, n: number): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === n;
}

/**
 * A hand-written check equivalent to PackIndexFileSchema for indexes exactly as the writer
 * makes them (no extra keys); zod (the definition) handles anything else, with its messages.
 * Checking tens of thousands of objects through zod held up the start of every pull (measured).
 * A test compares both on mutated indexes.
 */
export function fastPackIndexFile(json: unknown): PackIndexFile | undefined {
  if (!hasKeys(json, 5) || json.format !== PACK_INDEX_FORMAT || typeof json.pack !== 'string' || !DIGEST_RE.test(json.pack) || !isCount(json.packSize))
    return undefined;
  const { frames, objects } = json;
  if (!Array.isArray(frames) || frames.length < 1 || !Array.isArray(objects) || objects.length > MAX_INDEX_OBJECTS) return undefined;
  for (const f of frames as unknown[]) {
    if (!hasKeys(f, 3) || !isCount(f.offset) || !isCount(f.length, 1) || !isCount(f.rawLength, TAR_BLOCK) || f.rawLength % TAR_BLOCK !== 0) return undefined;
  }
  for (const o of objects as unknown[]) {
    if (
      !hasKeys(o, 4) ||
      typeof o.digest !== 'string' ||
      !DIGEST_RE.test(o.digest) ||
      !isCount(o.size) ||
      typeof o.frame !== 'number' ||
      !Number.isSafeInteger(o.frame) ||
      o.frame < 0 ||
      !isCount(o.offset, TAR_BLOCK) ||
      o.offset % TAR_BLOCK !== 0
    )
      return undefined;
  }
  return json as PackIndexFile;
}

/** Entries made by validatePackIndex (frozen, so still as validated): fetchObjects need not check them again. */
const validated = new WeakSet<PackIndexEntry>();

export function isValidatedEntry(e: PackIndexEntry): boolean {
  return validated.has(e);
}

function bad(indexDigest: Digest, why: string): never {
  throw new InvalidInputError(`pack index ${indexDigest} is invalid: ${why}`, 'the registry holds a damaged or hostile index; re-push the pack');
}

/** Structural checks zod cannot express: tiling frames, objects inside their frame, no overlaps. */
export function validatePackIndex(file: PackIndexFile, indexDigest: Digest): PackIndex {
  let end = 0;
  for (const [i, f] of file.frames.entries()) {
    if (f.offset !== end) bad(indexDigest, `frame ${i} starts at ${f.offset}, expected ${end} (frames must tile the pack)`);
    end = f.offset + f.length;
  }
  if (end !== file.packSize) bad(indexDigest, `frames end at ${end} but the pack is ${file.packSize} bytes`);

  const byFrame = new Map<number, PackObject[]>();
  let prev = '';
  for (const o of file.objects) {
    if (o.digest <= prev) bad(indexDigest, `objects not sorted or duplicated at ${o.digest}`);
    prev = o.digest;
    const f = file.frames[o.frame];
    if (f === undefined) bad(indexDigest, `object ${o.digest} names frame ${o.frame} of ${file.frames.length}`);
    if (o.offset + o.size > f.rawLength) bad(indexDigest, `object ${o.digest} ends past its frame's ${f.rawLength} bytes`);
    const list = byFrame.get(o.frame) ?? [];
    list.push(o);
    byFrame.set(o.frame, list);
  }
  for (const [fi, list] of byFrame) {
    list.sort((a, b) => a.offset - b.offset);
    let objEnd = 0;
    for (const o of list) {
      // Each object's data follows its own tar header, so consecutive data regions are at least a block apart.
      if (o.offset < objEnd + TAR_BLOCK) bad(indexDigest, `object ${o.digest} overlaps another object in frame ${fi}`);
      objEnd = o.offset + Math.ceil(o.size / TAR_BLOCK) * TAR_BLOCK;
    }
  }

  const entries = file.objects.map((o): PackIndexEntry => {
    const f = file.frames[o.frame]!;
    const e = Object.freeze({ digest: o.digest, size: o.size, frameOffset: f.offset, frameLength: f.length, frameRawLength: f.rawLength, offset: o.offset });
    validated.add(e);
    return e;
  });
  return { pack: file.pack, packSize: file.packSize, frames: file.frames, entries };
}
