/**
 * One image layer (a tar stream, gzip-, zstd-compressed or plain) becomes one minisandbox layer,
 * straight from the stream: nothing is unpacked to disk. File contents are hashed as they pass
 * and handed to the pack writer (held in memory up to one pack frame; a larger file is spooled
 * to one temporary file while hashed, packed, and removed). A manifest is sorted by path and a
 * tar is not: entry records go through an external merge sort (`entry-runs.ts`: sorted runs of
 * a bounded number of records spilled to temporary files, merged back in order), so a layer of
 * a million entries holds one run in memory, not every entry. What needs the whole layer is
 * resolved in the merge: a later entry of a path wins (its records sort together, by tar
 * order); a directory replaced by a non-directory drops what was below it before; whiteouts
 * and opaque markers meet their path's entries. Only hardlinks keep state beyond a run: the
 * links themselves and the versions of the paths they name (a first merge pass collects those),
 * so each group's file and first name are known before the manifest is written.
 *
 * OCI rules: `.wh.NAME` deletes NAME from lower layers (a whiteout entry), `.wh..wh..opq` makes
 * its directory opaque; hardlinks name an earlier entry of the same layer; later entries of the
 * same name replace earlier ones, as extraction would. Hostile input (absolute names, `..`,
 * links to outside the layer, entries below a symlink or file of the layer, unknown entry types)
 * is refused before anything is published.
 *
 * Implicit parents: a tar may hold `work/task.txt` without `work/`, and a layer is laid out as a
 * tree of its own, so the layer gets the directory (IMPLICIT_DIR) and lists it for the import,
 * which gives it the attributes below it in the image (implicit-parents.ts). What an entry needs
 * above it travels through the sort as Parent records on its ancestors, added only for those not
 * known to be directories at that point of the tar (a bounded set of recent ones): one per
 * directory for a tar in directory order, never one per entry held in memory. The merge replays
 * each path's records in tar order (settle) and sees whether a directory is given, implied,
 * replaced or missing where something below needs it. Every entry written goes through the
 * manifest reader's checks of entries together, so a manifest a pull would refuse is never
 * published.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline, Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { DecompressStream } from 'zstd-napi';
import type { Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, UnsafePathError } from '../errors.js';
import { fastEntryLine } from '../layer/capture-line.js';
import type { LayerRef, PackRef } from '../layer/env.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { MANIFEST_HEADER, type Entry, type FileEntry } from '../layer/manifest.js';
import { ManifestChecker, type Shape } from '../layer/manifest-read.js';
import { checkRelativePath, encodePath } from '../layer/path.js';
import { xattrsTooLarge } from '../layer/xattr-room.js';
import { parsePackIndex } from '../pack/pack-index.js';
import { publishPacks } from '../pack/publish.js';
import { FRAME_TARGET_BYTES } from '../pack/settings.js';
import { PackWriter } from '../pack/writer.js';
import type { Registry } from '../registry/registry.js';
import type { ObjectCatalog } from '../store/catalog.js';
import { compressFile } from '../store/zstdfile.js';
import { Kind, RunSorter, type Rec } from './entry-runs.js';
import { readTar, type TarHeader } from './tar-reader.js';

export interface ConvertOptions {
  /** Directory for the manifest, packs and spooled large files (removed by the caller). */
  workDir: string;
  catalog: ObjectCatalog;
  /** The blob's digest as the image names it (checked against the bytes read), if known. */
  expectDigest?: Digest;
  /** The image config's diff id for this layer (checked against the uncompressed bytes). */
  expectDiffId?: Digest;
  /** What the layer is called in messages. */
  what: string;
  onBytes?: (n: number) => void;
  /** Entry records per sorted run held in memory before it is spilled (default 16,384). */
  runEntries?: number;
}

export interface ConvertResult {
  layer: LayerRef;
  /** sha256 and size of the raw blob as read. */
  digest: Digest;
  compressedSize: number;
  /** sha256 and size of the uncompressed tar. */
  diffId: Digest;
  size: number;
  /** `etc/passwd` and `etc/group` of this layer, if it has them (to resolve the config's User). */
  passwd?: string;
  group?: string;
  /**
   * The blob listing the directories the layer implies (see implicit-parents.ts), if it has any
   * whose attributes come from below: a zstd frame of one JSON path per line, in manifest order.
   */
  implicitDirs?: Digest;
  newObjects: number;
  reusedObjects: number;
  /** Most entry records held in memory at once (a run, the hardlinks and their paths' versions). */
  maxEntriesHeld: number;
  /** Sorted runs spilled to temporary files. */
  runs: number;
}

type Compression = 'gzip' | 'zstd' | 'none';

function sniff(head: Buffer): Compression {
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return 'gzip';
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) return 'zstd';
  return 'none';
}

/** The raw bytes hashed and counted as they pass, then decompressed as their magic says. */
async function* decompressed(raw: AsyncIterable<Buffer>, tap: (b: Buffer) => void): AsyncGenerator<Buffer> {
  const it = raw[Symbol.asyncIterator]();
  let head = Buffer.alloc(0);
  let ended = false;
  while (head.length < 4) {
    const r = await it.next();
    if (r.done === true) {
      ended = true;
      break;
    }
    const b = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
    tap(b);
    head = Buffer.concat([head, b]);
  }
  const rest = async function* (): AsyncGenerator<Buffer> {
    if (head.length > 0) yield head;
    while (!ended) {
      const r = await it.next();
      if (r.done === true) return;
      const b = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
      tap(b);
      yield b;
    }
  };
  const kind = sniff(head);
  if (kind === 'none') {
    yield* rest();
    return;
  }
  const d = kind === 'gzip' ? createGunzip() : new DecompressStream();
  const out = pipeline(Readable.from(rest()), d, () => undefined);
  try {
    for await (const c of out) yield c as Buffer;
  } catch (e) {
    if (e instanceof Error && !(e instanceof InvalidInputError) && !('code' in e && typeof e.code === 'string' && e.code.startsWith('ERR_STREAM'))) {
      throw new InvalidInputError(`${kind} layer cannot be decompressed: ${e.message}`, 'the blob is corrupt or truncated; fetch it again');
    }
    throw e;
  }
}

interface Group {
  file: FileEntry;
  /** The first (byte-wise) of the names that still hold this content at the layer's end. */
  head?: Buffer;
}

const RUN_ENTRIES = 16_384;
/** Directories remembered as such while a tar is read (see dirsNow). */
const DIRS_NOW = 65_536;
const EMPTY = Buffer.alloc(0);
const key = (raw: Buffer): string => raw.toString('latin1');

/** Records grouped by path (consecutive in the merge), each group in tar order. */
async function* byPath(recs: AsyncIterable<Rec>): AsyncGenerator<{ raw: Buffer; recs: Rec[] }> {
  let cur: { raw: Buffer; recs: Rec[] } | undefined;
  for await (const r of recs) {
    if (cur !== undefined && cur.raw.equals(r.raw)) cur.recs.push(r);
    else {
      if (cur !== undefined) yield cur;
      cur = { raw: r.raw, recs: [r] };
    }
  }
  if (cur !== undefined) yield cur;
}

/** What a path holds at the end of the layer, as extraction in tar order would leave it. */
interface Settled {
  /** Its last version, a directory the layer implies (an entry below needs it, none is given), or nothing. */
  last: Rec | 'implicit' | undefined;
  /** Deleted from the layers below: a whiteout of it, or a non-directory of this layer in its place before. */
  deleted: boolean;
  opaque: boolean;
}

/**
 * Replays a path's records in tar order (see Settled), skipping those an ancestor's replacement
 * by a non-directory removed: a directory (given or implied) replaced by a non-directory drops
 * what was below it before (noted in `cuts`, which the paths below, later in the merge, read);
 * an entry below a path that is then a non-directory is refused, as extraction would fail or
 * follow a symlink out of the layer.
 */
function settle(raw: Buffer, recs: Rec[], cuts: Map<string, number[]>, what: string): Settled {
  const from = lastCut(raw, cuts);
  let last: Settled['last'];
  let deleted = false;
  let opaque = false;
  for (const r of recs) {
    if (r.seq < from) continue;
    switch (r.kind) {
      case Kind.Dir:
        last = r;
        break;
      case Kind.File:
      case Kind.Other:
      case Kind.Link:
        if (last === 'implicit' || last?.kind === Kind.Dir) {
          const c = cuts.get(key(raw));
          if (c === undefined) cuts.set(key(raw), [r.seq]);
          else c.push(r.seq);
        }
        last = r;
        deleted = true;
        break;
      case Kind.Opaque:
      case Kind.Parent:
        if (last !== undefined && last !== 'implicit' && last.kind !== Kind.Dir) {
          const path = JSON.stringify(encodePath(raw));
          if (r.kind === Kind.Opaque) throw new InvalidInputError(`${what}: opaque marker inside ${path}, which is not a directory`);
          throw new UnsafePathError(encodePath(raw), `${what} has entries below it where it is a ${kindName(last)} (a path through a symlink or file)`);
        }
        last ??= 'implicit';
        if (r.kind === Kind.Opaque) opaque = true;
        break;
      case Kind.Whiteout:
        deleted = true;
        break;
    }
  }
  return { last, deleted, opaque };
}

function kindName(r: Rec): string {
  if (r.kind === Kind.File) return 'file';
  if (r.kind === Kind.Link) return 'hardlink';
  return (JSON.parse(r.payload.toString('utf8')) as Entry).type;
}

/** The tar position after which an ancestor of `raw` was last replaced by a non-directory (0: never). */
function lastCut(raw: Buffer, cuts: Map<string, number[]>): number {
  let at = 0;
  if (cuts.size === 0) return at;
  for (let i = raw.indexOf(0x2f); i >= 0; i = raw.indexOf(0x2f, i + 1)) {
    const c = cuts.get(key(raw.subarray(0, i)));
    if (c !== undefined) for (const s of c) if (s > at) at = s;
  }
  return at;
}

/** Whether a directory above `raw` was replaced by a non-directory between tar positions `from` and `to`. */
function cutBetween(raw: Buffer, from: number, to: number, cuts: Map<string, number[]>): boolean {
  if (cuts.size === 0) return false;
  for (let i = raw.indexOf(0x2f); i >= 0; i = raw.indexOf(0x2f, i + 1)) {
    const c = cuts.get(key(raw.subarray(0, i)));
    if (c !== undefined && c.some((s) => s > from && s < to)) return true;
  }
  return false;
}

/**
 * The version of these conversion rules, recorded with what they made (ImageInfo.converter): an
 * import reuses only conversions of this version. 2: directories a layer implies are made
 * (before, a pull refused their entries).
 */
export const CONVERTER_VERSION = 2;

/** A directory a layer implies, as the manifest first holds it: what runtimes give a missing parent. */
export const IMPLICIT_DIR = { type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: '0' } as const;

const OVERLAY_XATTR = /^(trusted|user)\.overlay\./;
const WH = '.wh.';
const OPAQUE = '.wh..wh..opq';

/** A tar name as a manifest path: `./` and trailing `/` dropped; absolute names and `..` refused. */
function normalize(name: Buffer, what: string): { raw: Buffer; path: string } | null {
  let b = name;
  while (b.length >= 2 && b[0] === 0x2e && b[1] === 0x2f) b = b.subarray(2);
  while (b.length > 0 && b[b.length - 1] === 0x2f) b = b.subarray(0, b.length - 1);
  if (b.length === 0 || (b.length === 1 && b[0] === 0x2e)) return null; // the root itself
  const path = encodePath(b);
  if (b[0] === 0x2f) throw new UnsafePathError(path, `absolute name in ${what}`);
  checkRelativePath(path);
  return { raw: Buffer.from(b), path };
}

function parentAndBase(raw: Buffer): { parent: Buffer; base: Buffer } {
  const i = raw.lastIndexOf(0x2f);
  return i < 0 ? { parent: Buffer.alloc(0), base: raw } : { parent: raw.subarray(0, i), base: raw.subarray(i + 1) };
}

function xattrsOf(h: TarHeader): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  // overlayfs' own attributes would steer the sandbox's overlay: never taken from an image
  for (const [k, v] of [...h.xattrs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) if (!OVERLAY_XATTR.test(k)) (out ??= {})[k] = v.toString('base64');
  return out;
}

const MAX_ID = 0xffffffff;

export async function convertLayer(reg: Registry, chunks: AsyncIterable<Buffer>, opts: ConvertOptions): Promise<ConvertResult> {
  await mkdir(opts.workDir, { recursive: true });
  const rawHash = createHash('sha256');
  let rawBytes = 0;
  const tap = (b: Buffer): void => {
    rawHash.update(b);
    rawBytes += b.length;
    opts.onBytes?.(b.length);
  };
  const writer = new PackWriter({ tempDir: opts.workDir });
  const runDir = join(opts.workDir, `runs-${randomBytes(6).toString('hex')}`);
  await mkdir(runDir, { recursive: true });
  const sorter = new RunSorter(runDir, opts.runEntries ?? RUN_ENTRIES);
  const links: Array<{ raw: Buffer; seq: number; target: Buffer; self: boolean }> = [];
  let seq = 0;
  /*
   * Paths known to be directories at this point of the tar (a dir entry, an opaque marker or a
   * Parent record since), so that the entries of one directory add no Parent record each: a
   * record is added for an ancestor of an entry only when it is not known to be one. Holds each
   * directory's ancestors too, bounded (cleared when full: more records after, never fewer), and
   * cleared when a non-directory takes the place of one of them (what was below it went).
   */
  const dirsNow = new Set<string>();
  const markParents = async (raw: Buffer, at: number): Promise<void> => {
    const slash = raw.lastIndexOf(0x2f);
    if (slash < 0 || dirsNow.has(key(raw.subarray(0, slash)))) return;
    if (dirsNow.size >= DIRS_NOW) dirsNow.clear();
    for (let i = raw.indexOf(0x2f); i >= 0; i = raw.indexOf(0x2f, i + 1)) {
      const k = key(raw.subarray(0, i));
      if (dirsNow.has(k)) continue;
      await sorter.add({ raw: Buffer.from(raw.subarray(0, i)), seq: at, kind: Kind.Parent, payload: EMPTY });
      dirsNow.add(k);
    }
  };
  const replaced = (raw: Buffer): void => {
    if (dirsNow.has(key(raw))) dirsNow.clear();
  };
  const used = new Map<Digest, PackRef>();
  const seen = new Set<Digest>();
  let reused = 0;
  let passwd: string | undefined;
  let group: string | undefined;
  let tarEnd: { digest: string; bytes: number } | undefined;
  const frame = FRAME_TARGET_BYTES;

  const inner = chunks[Symbol.asyncIterator]();
  // a source that fails (a registry gone) is reported as such, never as a digest mismatch
  let sourceFailed = false;
  const rawIt: AsyncIterator<Buffer> = {
    next: () =>
      inner.next().catch((e: unknown) => {
        sourceFailed = true;
        throw e;
      }),
  };
  const rawOnce: AsyncIterable<Buffer> = { [Symbol.asyncIterator]: () => rawIt };
  try {
    for await (const { header: h, body } of readTar(decompressed(rawOnce, tap), (r) => (tarEnd = r))) {
      const n = normalize(h.name, opts.what);
      if (n === null) {
        for await (const _ of body()) void _;
        continue;
      }
      const { parent, base } = parentAndBase(n.raw);
      const at = seq++;
      if (base.subarray(0, WH.length).toString('latin1') === WH) {
        for await (const _ of body()) void _;
        const baseStr = base.toString('latin1');
        if (baseStr === OPAQUE) {
          if (parent.length === 0)
            throw new InvalidInputError(
              `${opts.what}: an opaque marker at the root of the layer`,
              'a layer cannot hide the whole lower image; rebuild the image',
            );
          // the marker needs its directory, as an entry below it would
          const dir = Buffer.from(parent);
          await markParents(dir, at);
          await sorter.add({ raw: dir, seq: at, kind: Kind.Opaque, payload: EMPTY });
          dirsNow.add(key(dir));
        } else if (!baseStr.startsWith(`${WH}${WH}`)) {
          // `.wh..wh.*` other than the opaque marker are aufs bookkeeping, not deletions
          const target = Buffer.concat([parent.length > 0 ? Buffer.concat([parent, Buffer.from('/')]) : Buffer.alloc(0), base.subarray(WH.length)]);
          const t = normalize(target, opts.what);
          if (t !== null) {
            await markParents(t.raw, at);
            await sorter.add({ raw: t.raw, seq: at, kind: Kind.Whiteout, payload: EMPTY });
          }
        }
        continue;
      }
      await markParents(n.raw, at);
      if (h.uid > MAX_ID || h.gid > MAX_ID) throw new InvalidInputError(`${opts.what}: ${JSON.stringify(n.path)} has an owner beyond 2^32-1`);
      const common = { path: n.path, mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtimeNs.toString() };
      const xattrs = xattrsOf(h);
      if (xattrs !== undefined) {
        const why = xattrsTooLarge(Object.entries(xattrs).map(([k, v]) => [k, Buffer.byteLength(v, 'base64')]));
        if (why !== undefined)
          throw new InvalidInputError(
            `${opts.what}: ${JSON.stringify(n.path)}: ${why}`,
            'a pull could not lay it out on ext4: rebuild the image without the attribute (setfattr -x NAME) or with a smaller one',
          );
      }
      const withX = xattrs === undefined ? common : { ...common, xattrs };
      if (h.type === 'hardlink') {
        for await (const _ of body()) void _;
        const t = normalize(h.linkname, opts.what);
        if (t === null) throw new UnsafePathError(n.path, `hardlink to ".", which is not an earlier file of ${opts.what}`);
        // checked and grouped after the tar, against the target's versions (see resolveLinks)
        const self = t.path === n.path;
        links.push({ raw: n.raw, seq: at, target: t.raw, self });
        if (!self) {
          await sorter.add({ raw: n.raw, seq: at, kind: Kind.Link, payload: t.raw });
          replaced(n.raw);
        }
        continue;
      }
      let entry: Entry;
      switch (h.type) {
        case 'file': {
          const digest = await takeFile(h.size, body(), n.path);
          entry = { type: 'file', ...withX, size: h.size, digest };
          break;
        }
        case 'dir':
          entry = { type: 'dir', ...withX };
          break;
        case 'symlink':
          if (h.linkname.length === 0) throw new InvalidInputError(`${opts.what}: symlink ${JSON.stringify(n.path)} has an empty target`);
          entry = { type: 'symlink', ...withX, target: encodePath(h.linkname) };
          break;
        case 'fifo':
          entry = { type: 'fifo', ...withX };
          break;
        case 'char':
        case 'block':
          entry = { type: h.type, ...withX, major: h.devmajor, minor: h.devminor };
          break;
        default:
          throw new InvalidInputError(`${opts.what}: unsupported entry ${JSON.stringify(n.path)}`);
      }
      if (h.type !== 'file') for await (const _ of body()) void _;
      await sorter.add({
        raw: n.raw,
        seq: at,
        kind: entry.type === 'file' ? Kind.File : entry.type === 'dir' ? Kind.Dir : Kind.Other,
        payload: Buffer.from(fastEntryLine(entry), 'utf8'),
      });
      if (entry.type === 'dir') dirsNow.add(key(n.raw));
      else replaced(n.raw);
    }

    if (tarEnd === undefined) throw new InvalidInputError(`${opts.what}: the tar stream did not end`);
    const digest: Digest = `sha256:${rawHash.digest('hex')}`;
    if (opts.expectDigest !== undefined && digest !== opts.expectDigest) throw new DigestMismatchError(`${opts.what} blob`, opts.expectDigest, digest);
    const diffId = tarEnd.digest as Digest;
    if (opts.expectDiffId !== undefined && diffId !== opts.expectDiffId)
      throw new DigestMismatchError(`${opts.what} uncompressed (diff id)`, opts.expectDiffId, diffId);

    await sorter.seal();
    const { fileGroups, linkGroups, held } = await resolveLinks();

    // The merge, path by path: the last entry in tar order wins; whiteouts and opaque markers
    // meet it; each hardlink group becomes a file (its first name) and links to it.
    const manifestPath = join(opts.workDir, 'manifest.jsonl');
    const out = createWriteStream(manifestPath);
    const mh = createHash('sha256');
    const res = { entries: 0, files: 0, size: 0 };
    const objects = new Set<Digest>();
    let pending: string[] = [];
    let pendingLen = 0;
    const flush = async (): Promise<void> => {
      if (pending.length === 0) return;
      const b = Buffer.from(pending.join(''), 'utf8');
      pending = [];
      pendingLen = 0;
      mh.update(b);
      if (!out.write(b)) await new Promise<void>((r) => out.once('drain', r));
    };
    // What a pull would refuse is refused as it is written, before anything is published or
    // tagged: every entry goes through the reader's checks of entries together (parents, paths
    // through non-directories, order); its lines are canonical by construction. Hardlink targets
    // are the converter's own: each link names its group's first name, written before it (the
    // reader's check would hold a hash per file of the layer).
    const check = new ManifestChecker(opts.what, { parents: true, hardlinks: false });
    const emitLine = async (shape: Shape, raw: Buffer, line: string, file?: { size: number; digest: Digest }): Promise<void> => {
      check.emitted(shape, raw);
      pending.push(line);
      pendingLen += line.length;
      res.entries++;
      if (file !== undefined) {
        res.files++;
        res.size += file.size;
        objects.add(file.digest);
      }
      if (pendingLen >= 1 << 20) await flush();
    };
    pending.push(canonicalJson(MANIFEST_HEADER) + '\n');
    // implicit directories whose attributes are the ones below them in an image (see implicit-parents.ts)
    const implicitPath = join(opts.workDir, 'implicit-dirs.jsonl');
    const implicitOut = createWriteStream(implicitPath);
    let implicitDirs = 0;
    const cuts = new Map<string, number[]>();
    for await (const grp of byPath(sorter.merged())) {
      const s = settle(grp.raw, grp.recs, cuts, opts.what);
      const path = encodePath(grp.raw);
      const w = s.last;
      if (w === undefined) {
        // nothing of this layer at the path: a whiteout deletes it from below
        if (s.deleted) {
          const e = { type: 'whiteout' as const, path };
          await emitLine(e, grp.raw, fastEntryLine(e));
        }
        continue;
      }
      if (w === 'implicit') {
        // A directory the layer has entries in but no entry for. A stack shows a directory's
        // attributes from its uppermost layer, and extraction would have kept the one below:
        // the import gives it those (a runtime's 0755 root:root where nothing is below it).
        const e = { ...IMPLICIT_DIR, path, ...(s.opaque || s.deleted ? { opaque: true as const } : {}) };
        await emitLine(e, grp.raw, fastEntryLine(e));
        if (!s.deleted) {
          implicitDirs++;
          if (!implicitOut.write(`${JSON.stringify(path)}\n`)) await new Promise<void>((r) => implicitOut.once('drain', r));
        }
        continue;
      }
      const g = w.kind === Kind.Link ? linkGroups.get(w.seq) : w.kind === Kind.File ? fileGroups.get(w.seq) : undefined;
      if (g !== undefined) {
        const f = { size: g.file.size, digest: g.file.digest };
        const e: Entry = g.head!.equals(grp.raw) ? { ...g.file, path } : { type: 'hardlink', path, target: encodePath(g.head!) };
        await emitLine(e, grp.raw, fastEntryLine(e), e.type === 'file' ? f : undefined);
        continue;
      }
      if (w.kind === Kind.Link) throw new Error(`internal: hardlink ${JSON.stringify(path)} without a group`);
      const line = w.payload.toString('utf8');
      if (w.kind === Kind.Dir && (s.opaque || s.deleted)) {
        // deleted below (or replaced in this layer) and made again: a directory hides what was below it
        const e = { ...(JSON.parse(line) as Entry & { type: 'dir' }), opaque: true as const };
        await emitLine(e, grp.raw, fastEntryLine(e));
      } else if (w.kind === Kind.File) {
        const e = JSON.parse(line) as FileEntry;
        await emitLine(e, grp.raw, line, { size: e.size, digest: e.digest });
      } else await emitLine({ type: w.kind === Kind.Dir ? 'dir' : (kindName(w) as Entry['type']), path }, grp.raw, line);
    }
    implicitOut.end();
    await finished(implicitOut);
    await flush();
    out.end();
    await finished(out);

    await rm(runDir, { recursive: true, force: true });
    const packs = await writer.finish();
    await publishPacks(reg, packs);
    for (const p of packs) {
      const ref = { pack: p.pack, index: p.index };
      used.set(p.pack, ref);
      // the next layers and images of this import find these objects without reloading the catalog
      for (const e of parsePackIndex(p.indexBytes, p.index).entries) if (!opts.catalog.has(e.digest)) opts.catalog.set(e.digest, ref);
    }
    const compressed = join(opts.workDir, 'manifest.jsonl.zst');
    const m = await compressFile(manifestPath, compressed);
    await reg.putBlobFile(m.digest, compressed);
    let implicit: Digest | undefined;
    if (implicitDirs > 0) {
      const list = await compressFile(implicitPath, `${implicitPath}.zst`);
      await reg.putBlobFile(list.digest, `${implicitPath}.zst`);
      implicit = list.digest;
    }
    const layer: LayerRef = {
      digest: `sha256:${mh.digest('hex')}`,
      manifest: m.digest,
      packs: [...used.values()].sort((a, b) => (a.pack < b.pack ? -1 : 1)),
      size: res.size,
      entries: res.entries,
      objects: objects.size,
    };
    return {
      layer,
      digest,
      compressedSize: rawBytes,
      diffId,
      size: tarEnd.bytes,
      ...(passwd === undefined ? {} : { passwd }),
      ...(group === undefined ? {} : { group }),
      ...(implicit === undefined ? {} : { implicitDirs: implicit }),
      newObjects: packs.reduce((s, p) => s + p.objects, 0),
      reusedObjects: reused,
      maxEntriesHeld: sorter.maxHeld + held,
      runs: sorter.spilled,
    };
  } catch (e) {
    await writer.abort().catch(() => undefined);
    await rm(runDir, { recursive: true, force: true });
    // A corrupt blob usually breaks decompression or the tar first; when the blob's digest is
    // known, read the rest of it and say what really happened: its bytes are not the image's.
    if (opts.expectDigest !== undefined && !(e instanceof DigestMismatchError) && tarEnd === undefined && !sourceFailed) {
      let complete = false;
      try {
        for (;;) {
          const r = await rawIt.next();
          if (r.done === true) break;
          tap(Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array));
        }
        complete = true;
      } catch {
        // the source failed too: report the first error
      }
      const actual: Digest = `sha256:${rawHash.digest('hex')}`;
      if (complete && !sourceFailed && actual !== opts.expectDigest) throw new DigestMismatchError(`${opts.what} blob`, opts.expectDigest, actual);
    }
    throw e;
  }

  /** Hashes a file's body and queues its bytes for packing unless the registry has them. */
  async function takeFile(size: number, body: AsyncGenerator<Buffer>, path: string): Promise<Digest> {
    const h = createHash('sha256');
    if (size <= frame) {
      const data = Buffer.allocUnsafe(size);
      let at = 0;
      for await (const c of body) {
        c.copy(data, at);
        at += c.length;
        h.update(c);
      }
      const digest: Digest = `sha256:${h.digest('hex')}`;
      if (size <= 1 << 20 && (path === 'etc/passwd' || path === 'etc/group')) {
        if (path === 'etc/passwd') passwd = data.toString('utf8');
        else group = data.toString('utf8');
      }
      await place(digest, size, () => writer.addData({ digest, size }, data));
      return digest;
    }
    // too large to hold: spooled to one file while hashed, packed from it, removed
    const spool = join(opts.workDir, `spool-${randomBytes(6).toString('hex')}`);
    const fh = await open(spool, 'wx', 0o600);
    try {
      for await (const c of body) {
        h.update(c);
        let off = 0;
        while (off < c.length) off += (await fh.write(c, off, c.length - off)).bytesWritten;
      }
      await fh.close();
      const digest: Digest = `sha256:${h.digest('hex')}`;
      await place(digest, size, () => writer.add({ digest, size, path: spool }));
      return digest;
    } finally {
      await fh.close().catch(() => undefined);
      await rm(spool, { force: true });
    }
  }

  /**
   * Hardlinks against the versions of the paths they name (one merge pass collects those): a
   * link must name a file that existed at its point in the tar (or another link to one); the
   * group's file is that version's entry, its first name the least path still holding it.
   */
  async function resolveLinks(): Promise<{ fileGroups: Map<number, Group>; linkGroups: Map<number, Group>; held: number }> {
    const fileGroups = new Map<number, Group>();
    const linkGroups = new Map<number, Group>();
    if (links.length === 0) return { fileGroups, linkGroups, held: 0 };
    const want = new Set<string>();
    for (const l of links) {
      want.add(key(l.raw));
      want.add(key(l.target));
    }
    const hist = new Map<string, Rec[]>();
    const cuts = new Map<string, number[]>();
    let held = links.length;
    for await (const grp of byPath(sorter.merged())) {
      settle(grp.raw, grp.recs, cuts, opts.what);
      const versions = grp.recs.filter((r) => r.kind <= Kind.Link);
      if (want.has(key(grp.raw))) {
        hist.set(key(grp.raw), versions);
        held += versions.length;
      }
    }
    const candidates: Array<{ g: Group; raw: Buffer; seq: number }> = [];
    for (const l of links) {
      const versions = hist.get(key(l.target)) ?? [];
      let v: Rec | undefined;
      for (const r of versions) if (r.seq < l.seq) v = r;
      const what = `hardlink to ${JSON.stringify(encodePath(l.target))}`;
      if (v === undefined || cutBetween(l.target, v.seq, l.seq, cuts))
        throw new UnsafePathError(encodePath(l.raw), `${what}, which is not an earlier file of ${opts.what}`);
      let g: Group | undefined;
      if (v.kind === Kind.Link) g = linkGroups.get(v.seq);
      else if (v.kind === Kind.File) {
        g = fileGroups.get(v.seq);
        if (g === undefined) {
          g = { file: JSON.parse(v.payload.toString('utf8')) as FileEntry };
          fileGroups.set(v.seq, g);
          candidates.push({ g, raw: l.target, seq: v.seq });
        }
      } else throw new UnsafePathError(encodePath(l.raw), `${what}, which is a ${(JSON.parse(v.payload.toString('utf8')) as Entry).type}`);
      if (g === undefined) throw new Error(`internal: ${what} without a group`);
      if (l.self) continue;
      linkGroups.set(l.seq, g);
      candidates.push({ g, raw: l.raw, seq: l.seq });
    }
    // a name holds the group's content at the end if its last version is the one that joined it
    for (const c of candidates) {
      const versions = hist.get(key(c.raw))!;
      if (versions[versions.length - 1]!.seq !== c.seq || cutBetween(c.raw, c.seq, Infinity, cuts)) continue;
      if (c.g.head === undefined || Buffer.compare(c.raw, c.g.head) < 0) c.g.head = c.raw;
    }
    return { fileGroups, linkGroups, held };
  }

  async function place(digest: Digest, size: number, add: () => Promise<void>): Promise<void> {
    void size;
    const have = opts.catalog.get(digest);
    if (have !== undefined) {
      used.set(have.pack, have);
      if (!seen.has(digest)) reused++;
      seen.add(digest);
      return;
    }
    if (seen.has(digest)) return;
    seen.add(digest);
    await add();
  }
}
