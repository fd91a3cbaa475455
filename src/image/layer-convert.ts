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
 * links to outside the layer, unknown entry types) is refused before anything is published.
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

/** A directory replaced by a non-directory drops the entries below it that came before. */
function noteCuts(raw: Buffer, versions: Rec[], cuts: Map<string, number[]>): void {
  for (let i = 1; i < versions.length; i++) {
    const k = versions[i]!.kind;
    if (versions[i - 1]!.kind === Kind.Dir && (k === Kind.File || k === Kind.Other)) {
      const c = cuts.get(key(raw));
      if (c === undefined) cuts.set(key(raw), [versions[i]!.seq]);
      else c.push(versions[i]!.seq);
    }
  }
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
          await sorter.add({ raw: Buffer.from(parent), seq: at, kind: Kind.Opaque, payload: EMPTY });
        } else if (!baseStr.startsWith(`${WH}${WH}`)) {
          // `.wh..wh.*` other than the opaque marker are aufs bookkeeping, not deletions
          const target = Buffer.concat([parent.length > 0 ? Buffer.concat([parent, Buffer.from('/')]) : Buffer.alloc(0), base.subarray(WH.length)]);
          const t = normalize(target, opts.what);
          if (t !== null) await sorter.add({ raw: t.raw, seq: at, kind: Kind.Whiteout, payload: EMPTY });
        }
        continue;
      }
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
        if (!self) await sorter.add({ raw: n.raw, seq: at, kind: Kind.Link, payload: t.raw });
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
    const emitLine = async (line: string, file?: { size: number; digest: Digest }): Promise<void> => {
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
    const notDir = (path: string): InvalidInputError =>
      new InvalidInputError(`${opts.what}: opaque marker inside ${JSON.stringify(path)}, which is not a directory`);
    pending.push(canonicalJson(MANIFEST_HEADER) + '\n');
    const cuts = new Map<string, number[]>();
    for await (const grp of byPath(sorter.merged())) {
      const versions = grp.recs.filter((r) => r.kind <= Kind.Link);
      noteCuts(grp.raw, versions, cuts);
      const whiteout = grp.recs.some((r) => r.kind === Kind.Whiteout);
      const opq = grp.recs.some((r) => r.kind === Kind.Opaque);
      const path = encodePath(grp.raw);
      const w = versions[versions.length - 1];
      if (w === undefined || cutBetween(grp.raw, w.seq, Infinity, cuts)) {
        // nothing of this layer at the path: a whiteout deletes it from below, an opaque marker
        // makes a directory (a whiteout and an opaque marker: the marker is inside a deletion)
        if (opq && whiteout) throw notDir(path);
        if (opq) await emitLine(fastEntryLine({ type: 'dir', path, mode: 0o755, uid: 0, gid: 0, mtime: '0', opaque: true }));
        else if (whiteout) await emitLine(fastEntryLine({ type: 'whiteout', path }));
        continue;
      }
      const g = w.kind === Kind.Link ? linkGroups.get(w.seq) : w.kind === Kind.File ? fileGroups.get(w.seq) : undefined;
      if (g !== undefined) {
        if (opq) throw notDir(path);
        const f = { size: g.file.size, digest: g.file.digest };
        if (g.head!.equals(grp.raw)) await emitLine(fastEntryLine({ ...g.file, path }), f);
        else await emitLine(fastEntryLine({ type: 'hardlink', path, target: encodePath(g.head!) }));
        continue;
      }
      if (w.kind === Kind.Link) throw new Error(`internal: hardlink ${JSON.stringify(path)} without a group`);
      if (opq && w.kind !== Kind.Dir) throw notDir(path);
      const line = w.payload.toString('utf8');
      if (w.kind === Kind.Dir && (opq || whiteout)) {
        // deleted below and recreated in the same layer: a directory hides what was below it
        await emitLine(fastEntryLine({ ...(JSON.parse(line) as Entry & { type: 'dir' }), opaque: true }));
      } else if (w.kind === Kind.File) {
        const e = JSON.parse(line) as FileEntry;
        await emitLine(line, { size: e.size, digest: e.digest });
      } else await emitLine(line);
    }
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
      const versions = grp.recs.filter((r) => r.kind <= Kind.Link);
      noteCuts(grp.raw, versions, cuts);
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
