/**
 * Capture: a directory tree becomes a layer manifest (canonical JSONL, sorted byte-wise by
 * path), written and hashed as it is produced, plus a report of every distinct file content.
 *
 * The walk is iterative and visits paths in canonical order directly: in a directory's sorted
 * listing, a subdirectory `d` contributes its own entry under key `d` and its contents under
 * key `d/`, which is exactly where byte-wise order of full paths puts them (`d` < `d-x` < `d/a`).
 * So memory is the listings of the directories on the current path, never the whole tree.
 * File hashing runs in worker threads; entries wait in a bounded window until their digests
 * are in, and leave it in canonical order.
 *
 * The tree may be changing under us and hostile (a live sandbox's upper: a directory swapped for a
 * symlink to a host directory mid-walk), so no step follows a link: every name is reached relative
 * to its directory's held fd (util/fs-at.ts), each directory opened with O_NOFOLLOW from its
 * parent's, each file opened with O_NOFOLLOW|O_NONBLOCK and read only if it is still the regular
 * file lstat saw; the pack writer reopens objects the same way (CapturedObject.open), and the
 * extended attributes come from a helper that walks the same way (xattr.ts). A swapped name then
 * reads the directory that was listed, or fails the capture; it never reads outside the tree.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fstatSync, lstatSync, openSync, readdirSync, readlinkSync, realpathSync, renameSync, rmSync, writeSync, type BigIntStats } from 'node:fs';
import { availableParallelism } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { fdDirPath, fdDirPrefix, openDirAt, openDirNoFollow, openFileAt } from '../util/fs-at.js';
import { HashPool, type HashResult } from './capture-hash.js';
import { DigestSet } from './capture-digestset.js';
import { fastEntryLine } from './capture-line.js';
import { MANIFEST_HEADER, type Entry } from './manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { encodePath } from './path.js';
import { readTreeXattrs, type TreeXattrs, type Xattrs } from './xattr.js';

export interface CapturedObject {
  digest: Digest;
  size: number;
  /**
   * Absolute path of one file holding these bytes, for messages. Raw bytes (a Buffer) from
   * capture, since a string could not name a file whose name is not UTF-8.
   */
  path: string | Buffer;
  /**
   * Opens that file again to pack it, through its held directory (never by `path`, which may
   * lead elsewhere by now): valid until the onObject call it came with settles.
   */
  open: () => number;
}

export interface CaptureOptions {
  /** Where the manifest is written (atomically: temporary name, then rename). */
  manifestPath: string;
  /** The tree is an overlayfs upper dir: record whiteouts and opaque dirs. */
  overlayUpper?: boolean;
  /** Host id base subtracted from every uid/gid (trees written by a rootless sandbox). */
  idShift?: number;
  /** Called once per distinct content, in canonical order of first use; awaited (backpressure). */
  onObject?: (o: CapturedObject) => void | Promise<void>;
  /** Things skipped or worth knowing (sockets, ...). */
  onWarning?: (message: string) => void;
  /**
   * Walk `root` as given (absolute) instead of resolving it first: for a tree reached through
   * another process's `/proc/<pid>/root`, which realpath would resolve into this process's own
   * mount namespace, i.e. to a different directory.
   */
  keepRootPath?: boolean;
  /** Hashing worker threads; 0 hashes on the calling thread. Default: min(4, cores). */
  hashWorkers?: number;
  /** Files hashed on the calling thread before the workers start (small trees never start them). Default 2048. */
  hashInlineFiles?: number;
}

export interface CaptureResult {
  /** sha256 of the manifest bytes: the layer's identity. */
  digest: Digest;
  manifestPath: string;
  entries: number;
  /** Regular file entries (hardlinks not counted). */
  files: number;
  /** Sum of regular file sizes. */
  size: number;
  /** Distinct contents. */
  objects: number;
}

/**
 * Entries waiting for their digest, at most this many, so memory does not grow with the tree.
 * 16 batches keep the hashing workers busy; more only lets entries wait long enough to be
 * promoted out of V8's young generation, which grew the old one (8192: ~6 MiB more peak RSS).
 */
const WINDOW = 2048;
const WRITE_CHUNK = 1 << 20;
/** Directories held open at once before the window is drained (a tree of one-file directories would hold one per entry). */
const MAX_OPEN_DIRS = 512;

/** A directory of the tree held open: its entries are reached through it. Closed when nothing uses it. */
interface Dir {
  fd: number;
  /** fdDirPrefix(fd): a name appended names that entry of this directory. */
  prefix: Buffer;
  /** Its frame while it is walked, and each of its files until emitted. */
  refs: number;
}

interface Item {
  entry: Entry;
  /** Absolute source path of a regular file still being hashed or to be reported. */
  abs?: Buffer;
  /** A regular file: its name in its held directory, and the inode lstat saw. */
  file?: { dir: Dir; at: Buffer; ino: bigint };
  ready: boolean;
  error?: Error;
}

interface Frame {
  dir: Dir;
  abs: Buffer;
  rel: Buffer | undefined;
  items: Array<{ name: Buffer; key: Buffer; descend: boolean }>;
  next: number;
}

export async function captureLayer(root: string, opts: CaptureOptions): Promise<CaptureResult> {
  let rootReal: string;
  try {
    if (opts.keepRootPath === true && !isAbsolute(root)) throw new InvalidInputError(`capture: ${root} must be an absolute path`);
    rootReal = opts.keepRootPath === true ? root.replace(/\/+$/, '') : realpathSync(root);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) throw new NotFoundError(`capture: directory ${root}`, 'give the path of an existing directory tree');
    throw e;
  }
  let rootFd: number;
  try {
    rootFd = openDirNoFollow(rootReal);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) throw new NotFoundError(`capture: directory ${root}`, 'give the path of an existing directory tree');
    if (isErrno(e, 'ENOTDIR') || isErrno(e, 'ELOOP')) throw new InvalidInputError(`capture: ${root} is not a directory`);
    throw e;
  }
  const idShift = opts.idShift ?? 0;
  const overlay = opts.overlayUpper ?? false;
  const warn = opts.onWarning ?? (() => undefined);

  const tmp = join(dirname(opts.manifestPath), `.${basename(opts.manifestPath)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  const open = new Set<Dir>();
  const hold = (fd: number): Dir => {
    const d = { fd, prefix: fdDirPrefix(fd), refs: 1 };
    open.add(d);
    return d;
  };
  const release = (d: Dir): void => {
    if (--d.refs > 0) return;
    open.delete(d);
    closeSync(d.fd);
  };
  const rootDir = hold(rootFd);
  let fd: number;
  try {
    fd = openSync(tmp, 'wx', 0o644);
  } catch (e) {
    release(rootDir);
    throw e;
  }
  const hash = createHash('sha256');
  let out: string[] = [];
  let outLen = 0;
  const writeOut = (s: string): void => {
    out.push(s);
    outLen += s.length;
    if (outLen >= WRITE_CHUNK) flushOut();
  };
  const flushOut = (): void => {
    if (out.length === 0) return;
    const b = Buffer.from(out.join(''), 'utf8');
    hash.update(b);
    let off = 0;
    while (off < b.length) off += writeSync(fd, b, off, b.length - off);
    out = [];
    outLen = 0;
  };

  const pool = new HashPool(opts.hashWorkers ?? Math.min(4, availableParallelism()), opts.hashInlineFiles);
  const seen = new DigestSet();
  const links: LinkGroups = new Map(); // nlink > 1 only
  const queue: Item[] = [];
  let head = 0;
  const res = { entries: 0, files: 0, size: 0, objects: 0 };
  let xattrs: TreeXattrs | undefined;

  const emit = async (it: Item): Promise<void> => {
    if (it.error !== undefined) throw it.error;
    const e = it.entry;
    writeOut(fastEntryLine(e));
    res.entries++;
    if (e.type === 'file') {
      res.files++;
      res.size += e.size;
      const file = it.file!;
      if (seen.add(Buffer.from(e.digest.slice(7), 'hex'))) {
        res.objects++;
        const r = opts.onObject?.({ digest: e.digest, size: e.size, path: it.abs!, open: () => openFileAt(file.at, file.ino) });
        if (r !== undefined) await r;
      }
      release(file.dir);
    }
  };
  /** Emits every finished item at the head of the window, in order. */
  const drainReady = async (): Promise<void> => {
    while (head < queue.length && queue[head]!.ready) {
      const it = queue[head]!;
      queue[head++] = undefined as unknown as Item; // let it be collected
      await emit(it);
    }
    if (head > 4096 && head * 2 > queue.length) {
      queue.splice(0, head);
      head = 0;
    }
  };
  /** Waits until the window has room (or, with `all`, until it is empty). */
  const drain = async (all: boolean): Promise<void> => {
    await drainReady();
    while (queue.length - head >= (all ? 1 : WINDOW)) {
      pool.flush();
      await pool.progress();
      await drainReady();
    }
  };

  try {
    if (!fstatSync(rootFd).isDirectory()) throw new InvalidInputError(`capture: ${root} is not a directory`);
    xattrs = await readTreeXattrs(fdDirPath(rootFd), dirname(opts.manifestPath));
    writeOut(`${canonicalJson(MANIFEST_HEADER)}\n`);
    const rootBuf = Buffer.from(rootReal);
    const rootLen = rootBuf.length + 1;
    const stack: Frame[] = [listDir(rootDir, rootBuf, undefined)];
    let sinceYield = 0;
    while (stack.length > 0) {
      const f = stack[stack.length - 1]!;
      if (f.next >= f.items.length) {
        stack.pop();
        release(f.dir);
        continue;
      }
      const item = f.items[f.next++]!;
      const abs = Buffer.concat([f.abs, SLASH, item.name]);
      const rel = abs.subarray(rootLen); // a view: one allocation per entry, not two
      const at = Buffer.concat([f.dir.prefix, item.name]);
      if (item.descend) {
        // each file waiting in the window holds its directory open: bound the fds that takes
        if (open.size >= MAX_OPEN_DIRS) await drain(true);
        let dirFd: number;
        try {
          dirFd = openDirAt(at);
        } catch (e) {
          // swapped for a symlink (ENOTDIR) or removed since its parent was listed
          throw treeChanged(encodePath(rel), e);
        }
        stack.push(listDir(hold(dirFd), abs, rel));
        continue;
      }
      const it = makeItem(f.dir, at, abs, rel, xattrs, overlay, idShift, links, warn);
      if (it === undefined) continue;
      queue.push(it);
      if (it.file !== undefined) it.file.dir.refs++;
      if (!it.ready) {
        const size = it.entry.type === 'file' ? it.entry.size : 0;
        pool.submit(at, size, it.file!.ino, (err, r) => settle(it, err, r));
      }
      if (queue.length - head >= WINDOW) await drain(false);
      else if (++sinceYield >= 512) {
        // let finished batches come back so the workers never starve while we walk
        sinceYield = 0;
        pool.flush();
        await new Promise<void>((r) => setImmediate(r));
        await drainReady();
      }
    }
    await drain(true);
    flushOut();
    // no fsync: the manifest is an intermediate file (push compresses and uploads it, and the
    // registry makes that durable); a crash loses the capture, which a rerun repeats
    closeSync(fd);
    renameSync(tmp, opts.manifestPath);
  } catch (e) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
    rmSync(tmp, { force: true });
    throw e;
  } finally {
    xattrs?.close();
    // the workers first: a directory is closed only once nothing can read through it
    await pool.close();
    for (const d of open) closeSync(d.fd);
  }
  return { digest: `sha256:${hash.digest('hex')}`, manifestPath: opts.manifestPath, ...res };
}

const SLASH = Buffer.from('/');

/** dev:ino -> the group's file entry path and how many of its names are still to come. */
type LinkGroups = Map<string, { path: string; unseen: number }>;

function settle(it: Item, err: Error | undefined, r: HashResult | undefined): void {
  it.ready = true;
  const e = it.entry;
  if (e.type !== 'file') return;
  if (err !== undefined || r === undefined) {
    it.error = treeChanged(e.path, err);
    return;
  }
  if (r.size !== e.size) {
    it.error = new InvalidInputError(
      `capture: ${JSON.stringify(e.path)} changed size while being read (${e.size} -> ${r.size} bytes)`,
      'capture a tree nothing is writing to',
    );
    return;
  }
  e.digest = `sha256:${r.hex}`;
}

function treeChanged(path: string, cause: unknown): Error {
  if (isErrno(cause, 'ENAMETOOLONG')) {
    return new InvalidInputError(
      `capture: ${JSON.stringify(path)} is longer than PATH_MAX (4096 bytes) as an absolute path`,
      'capture from a shorter root path or flatten the tree',
    );
  }
  return new MinisandboxError('CAPTURE_IO', `capture: cannot read ${JSON.stringify(path)}: ${(cause as Error | undefined)?.message ?? 'unknown error'}`, {
    cause,
    hint: 'capture a tree nothing is writing to, readable by this user',
  });
}

/** Lists the held directory `dir` (readdir of its fd's path opens that very directory again). */
function listDir(dir: Dir, abs: Buffer, rel: Buffer | undefined): Frame {
  let dirents;
  try {
    dirents = readdirSync(fdDirPath(dir.fd), { encoding: 'buffer', withFileTypes: true });
  } catch (e) {
    throw treeChanged(rel === undefined ? '.' : encodePath(rel), e);
  }
  const items: Frame['items'] = [];
  for (const d of dirents) {
    const name = d.name as unknown as Buffer;
    items.push({ name, key: name, descend: false });
    if (d.isDirectory()) items.push({ name, key: Buffer.concat([name, SLASH]), descend: true });
  }
  items.sort((a, b) => Buffer.compare(a.key, b.key));
  return { dir, abs, rel, items, next: 0 };
}

function shiftId(id: number, base: number, what: string, path: string): number {
  if (id < base) {
    throw new InvalidInputError(
      `capture: ${JSON.stringify(path)} has ${what} ${id}, below the id shift base ${base}`,
      'the tree was not written only by the sandbox whose id base was given; fix the owner or capture without idShift',
    );
  }
  return id - base;
}

const OVERLAY_XATTR = /^(trusted|user)\.overlay\./;

function makeItem(
  dir: Dir,
  at: Buffer,
  abs: Buffer,
  rel: Buffer,
  tree: TreeXattrs,
  overlay: boolean,
  idShift: number,
  links: LinkGroups,
  warn: (m: string) => void,
): Item | undefined {
  const path = encodePath(rel);
  let st: BigIntStats;
  try {
    st = lstatSync(at, { bigint: true });
  } catch (e) {
    throw treeChanged(path, e);
  }
  const raw = tree.take(rel);
  let xattrs: Xattrs | undefined;
  let ovl: Xattrs | undefined;
  if (raw !== undefined) {
    for (const [k, v] of Object.entries(raw)) {
      // overlayfs' own attributes are stacking metadata, expressed by whiteout/opaque entries
      if (OVERLAY_XATTR.test(k)) (ovl ??= {})[k.replace(OVERLAY_XATTR, '')] = v;
      else (xattrs ??= {})[k] = v;
    }
  }
  if (overlay && ovl !== undefined && (ovl.redirect !== undefined || ovl.metacopy !== undefined)) {
    throw new InvalidInputError(
      `capture: ${JSON.stringify(path)} carries overlayfs ${ovl.redirect !== undefined ? 'redirect' : 'metacopy'} metadata, which a layer cannot express`,
      'mount the sandbox overlay with redirect_dir=off,metacopy=off',
    );
  }
  if (overlay) {
    // whiteouts carry no owner, so they are decided before the id shift can object to one
    if (st.isCharacterDevice() && st.rdev === 0n) return { entry: { type: 'whiteout', path }, ready: true };
    if (st.isFile() && ovl !== undefined && ovl.whiteout !== undefined) return { entry: { type: 'whiteout', path }, ready: true };
  }
  const mode = Number(st.mode & 0o7777n);
  const uid = shiftId(Number(st.uid), idShift, 'uid', path);
  const gid = shiftId(Number(st.gid), idShift, 'gid', path);
  const common = { path, mode, uid, gid, mtime: st.mtimeNs.toString(), ...(xattrs === undefined ? {} : { xattrs }) };
  if (st.isDirectory()) {
    const opaque = overlay && ovl !== undefined && ovl.opaque !== undefined && Buffer.from(ovl.opaque, 'base64').toString('latin1') === 'y';
    return { entry: { type: 'dir', ...common, ...(opaque ? { opaque: true as const } : {}) }, ready: true };
  }
  if (st.isFile()) {
    if (st.nlink > 1n) {
      const key = `${st.dev}:${st.ino}`;
      const group = links.get(key);
      // canonical order visits the byte-wise first name of a group first: it becomes the file
      if (group !== undefined) {
        // forget the group once all its names are seen (names outside the tree keep it alive)
        if (--group.unseen <= 0) links.delete(key);
        return { entry: { type: 'hardlink', path, target: group.path }, ready: true };
      }
      links.set(key, { path, unseen: Number(st.nlink) - 1 });
    }
    const size = Number(st.size);
    // the digest is filled in when the hash arrives; until then the entry is not emitted
    return { entry: { type: 'file', ...common, size, digest: PENDING }, abs, file: { dir, at, ino: st.ino }, ready: false };
  }
  if (st.isSymbolicLink()) {
    let target: Buffer;
    try {
      target = readlinkSync(at, { encoding: 'buffer' });
    } catch (e) {
      throw treeChanged(path, e);
    }
    return { entry: { type: 'symlink', ...common, target: encodePath(target) }, ready: true };
  }
  if (st.isFIFO()) return { entry: { type: 'fifo', ...common }, ready: true };
  if (st.isCharacterDevice() || st.isBlockDevice()) {
    const rdev = st.rdev;
    const major = Number(((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn));
    const minor = Number((rdev & 0xffn) | ((rdev >> 12n) & ~0xffn));
    return { entry: { type: st.isCharacterDevice() ? 'char' : 'block', ...common, major, minor }, ready: true };
  }
  if (st.isSocket()) {
    warn(`capture: skipped socket ${JSON.stringify(path)} (a socket cannot be recreated from a layer)`);
    return undefined;
  }
  throw new InvalidInputError(`capture: ${JSON.stringify(path)} has an unknown file type (mode ${st.mode.toString(8)})`);
}

const PENDING = `sha256:${'0'.repeat(64)}` as Digest;
