/**
 * Writes the entries of a manifest as a real tree under a fresh directory.
 *
 * Safety does not depend on the manifest reader: every entry's parent must be a directory this
 * run created, the target directory is new, and hardlink targets must be regular files this run
 * created, so no entry can reach outside the tree, however hostile the manifest.
 * Every file-system call of the tree goes through one FsmetaStream helper process, in entry
 * order: node parses and decides, the helper creates, links and sets metadata on the other core
 * (a thread-pool round trip per call was several times slower than tar -x, measured).
 * Pulls into root's store of manifests without escaped names skip this module: the helper reads
 * and lays those out itself (native/fsmeta-manifest.c, the same rules; a test feeds both the same
 * manifests), so a change here must be made there too.
 * Metadata is applied in an order that keeps it exact: owner before mode (chown clears setuid and
 * capabilities), xattrs after both, timestamps last, directories deepest-first once all their
 * children exist.
 */
import { createHash, randomBytes } from 'node:crypto';
import { type BigIntStats, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { digestHex } from '../cas/digest.js';
import { NotFoundError, UnsafePathError } from '../errors.js';
import type { Entry, FileEntry } from '../layer/manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { decodePath } from '../layer/path.js';
import { FsmetaStream } from './fsmeta.js';
import { ownersFor } from './owners.js';
import type { StorePaths } from './paths.js';

export interface MaterializeOptions {
  /** Added to every uid and gid (rootless sandboxes see host ids base + in-sandbox id). */
  idShift: number;
  /**
   * Share identical files through the store's link pool (read-only layers), or give every file
   * its own copy (exports a user will modify).
   */
  share: boolean;
  /** How deletions are written: 0/0 character devices (needs privilege) or overlay xattrs. */
  whiteouts: 'chardev' | 'xattr';
  /** Xattr namespace overlayfs reads opaque/whiteout marks from: `user` when mounted with userxattr. */
  overlayXattrNs: 'user' | 'trusted';
  /**
   * Objects fetched for this lay-out, into a directory private to it (`path` names them) or held
   * in memory (`take`): one on disk becomes its first pool inode where it lies (metadata set, then
   * moved into the pool), never copied; one in memory is written straight into the tree and
   * linked into the pool. `hexes` lists them; the lay-out consumes each once (removing it). While
   * they are still being fetched, `ready` says when one is there (undefined: now).
   */
  staging?: {
    path: (hex: string) => string;
    hexes: Set<string>;
    ready?: (hex: string) => Promise<void> | undefined;
    /** The bytes of an arrived object held in memory (once), if it was not written to `path`. */
    take?: (hex: string) => Buffer | undefined;
    /** Whether an arrived object is with the lay-out's helper, which places it (once). */
    inHelper?: (hex: string) => boolean;
  };
  /**
   * Contents that occur more than once in the manifest. Only for these does the lay-out
   * remember where it put them (memory per repeated content, not per file); when unknown, all are.
   */
  repeated?: Set<string>;
  /**
   * A helper already running in `target` (which then exists), shared with the fetch that writes
   * objects through it; the caller closes it. Without one, the lay-out makes `target` and its own.
   */
  stream?: FsmetaStream;
}

/** Records pumped to the helper (and a turn given to the event loop) every this many entries. */
const PUMP_EVERY = 512;

export async function materialize(
  store: StorePaths,
  entries: AsyncIterable<Entry>,
  target: string,
  opts: MaterializeOptions,
): Promise<{ files: number; linked: number; copied: number }> {
  if (opts.stream !== undefined) return layOut(store, entries, opts.stream, opts);
  await mkdir(target, { mode: 0o700 });
  const fs = await FsmetaStream.start(target, await ownersFor(opts.idShift));
  try {
    const stats = await layOut(store, entries, fs, opts);
    await fs.close();
    return stats;
  } catch (e) {
    await fs.abort();
    throw e;
  }
}

const ROOT = Buffer.from('.');

async function layOut(
  store: StorePaths,
  entries: AsyncIterable<Entry>,
  fs: FsmetaStream,
  opts: MaterializeOptions,
): Promise<{ files: number; linked: number; copied: number }> {
  const dirs = new Set<string>(['']);
  const fileLike = new Set<string>();
  const dirMeta: Entry[] = [];
  const pool = new LinkPool(store, fs, opts);
  const stats = { files: 0, linked: 0, copied: 0 };
  let n = 0;
  for await (const e of entries) {
    const slash = e.path.lastIndexOf('/');
    const parent = slash < 0 ? '' : e.path.slice(0, slash);
    if (!dirs.has(parent)) throw new UnsafePathError(e.path, 'its parent is not a directory of this layer (a path through a symlink or file?)');
    // relative to the tree: the helper runs in it
    const rel = decodePath(e.path);
    switch (e.type) {
      case 'dir':
        fs.mkdir(rel, 0o700);
        dirs.add(e.path);
        dirMeta.push(e);
        break;
      case 'file': {
        stats.files++;
        fileLike.add(e.path);
        if (opts.share) {
          const arrival = pool.arrival(e.digest);
          if (arrival !== undefined) await arrival;
          pool.place(e, rel);
          stats.linked++;
        } else {
          fs.copy(rel, pool.content(e));
          applyMeta(fs, rel, e, opts);
          stats.copied++;
        }
        break;
      }
      case 'hardlink': {
        if (!fileLike.has(e.target)) throw new UnsafePathError(e.path, `hardlink target ${JSON.stringify(e.target)} is not a file earlier in this layer`);
        fs.link(rel, decodePath(e.target));
        break;
      }
      case 'symlink':
        fs.symlink(rel, decodePath(e.target));
        applyMeta(fs, rel, e, opts);
        break;
      case 'fifo':
        fs.mknod(rel, 'p', e.mode);
        applyMeta(fs, rel, e, opts);
        break;
      case 'char':
      case 'block':
        // An unprivileged user may make no device node (not even as root of its user namespace),
        // and its sandboxes could not use one (nodev): a rootless lay-out leaves them out, as
        // rootless podman does.
        if (process.getuid?.() !== 0) break;
        fs.mknod(rel, e.type === 'char' ? 'c' : 'b', e.mode, e.major, e.minor);
        applyMeta(fs, rel, e, opts);
        break;
      case 'whiteout':
        if (opts.whiteouts === 'chardev') {
          fs.mknod(rel, 'c', 0, 0, 0);
        } else {
          // Kernel >= 6.7 xattr whiteouts: an empty file marked as such, in a dir marked to have them.
          fs.createEmpty(rel);
          fs.setxattr(rel, `${opts.overlayXattrNs}.overlay.whiteout`, Buffer.alloc(0));
          fs.setxattr(parent === '' ? ROOT : decodePath(parent), `${opts.overlayXattrNs}.overlay.opaque`, Buffer.from('x'));
        }
        break;
    }
    if (++n % PUMP_EVERY === 0) {
      await fs.pump();
      await new Promise((r) => setImmediate(r));
    } else if (fs.backlogged) {
      // big files between pumps: queued pieces past the spares would each be fresh memory
      await fs.pump();
    }
  }
  for (let i = dirMeta.length - 1; i >= 0; i--) {
    const d = dirMeta[i]!;
    const p = decodePath(d.path);
    applyMeta(fs, p, d, opts);
    if (d.type === 'dir' && d.opaque) fs.setxattr(p, `${opts.overlayXattrNs}.overlay.opaque`, Buffer.from('y'));
    if (i % PUMP_EVERY === 0) await fs.pump();
  }
  fs.chown(ROOT, opts.idShift, opts.idShift);
  fs.chmod(ROOT, 0o755);
  return stats;
}

interface Meta {
  mode: number;
  uid: number;
  gid: number;
  mtime: string;
  xattrs?: Record<string, string> | undefined;
}

function shiftedMeta(e: Meta, opts: MaterializeOptions): Meta {
  return { mode: e.mode, uid: e.uid + opts.idShift, gid: e.gid + opts.idShift, mtime: e.mtime, xattrs: e.xattrs };
}

function applyMeta(fs: FsmetaStream, p: Buffer, e: Entry, opts: MaterializeOptions): void {
  if (e.type === 'hardlink' || e.type === 'whiteout') return;
  writeMeta(fs, p, shiftedMeta(e, opts), e.type === 'symlink');
}

function writeMeta(fs: FsmetaStream, p: Buffer | string, m: Meta, isSymlink: boolean): void {
  fs.chown(p, m.uid, m.gid);
  if (!isSymlink) fs.chmod(p, m.mode);
  for (const [name, value] of Object.entries(m.xattrs ?? {}).sort(([a], [b]) => (a < b ? -1 : 1))) {
    fs.setxattr(p, name, Buffer.from(value, 'base64'));
  }
  fs.utimes(p, m.mtime);
}

/** The key of a metadata variant in pool names. */
function metaKey(m: Meta): string {
  return createHash('sha256').update(canonicalJson(m)).digest('hex').slice(0, 24);
}

/** Cheap identity of a metadata within one lay-out (not stored anywhere). */
function metaSig(m: Meta): string {
  return m.xattrs === undefined ? `${m.mode},${m.uid},${m.gid},${m.mtime}` : `${m.mode},${m.uid},${m.gid},${m.mtime},${canonicalJson(m.xattrs)}`;
}

function statOf(p: string): BigIntStats | undefined {
  return lstatSync(p, { bigint: true, throwIfNoEntry: false });
}

/** A pool inode fits a file if it is a regular file with exactly its mode, owner and mtime (and no xattrs are wanted). */
function fits(st: BigIntStats | undefined, m: Meta): boolean {
  return (
    st !== undefined &&
    st.isFile() &&
    m.xattrs === undefined &&
    Number(st.mode & 0o7777n) === m.mode &&
    st.uid === BigInt(m.uid) &&
    st.gid === BigInt(m.gid) &&
    st.mtimeNs === BigInt(m.mtime)
  );
}

/**
 * Places files through the store's pool of shared inodes (see paths.ts). A new pool inode is
 * prepared where only this lay-out sees it (the staging dir or tmp/), linked into the tree, and
 * then moved into the pool without replacing anything, so the tree always holds its own inode
 * with its own metadata and other processes never see a pool name whose metadata is unfinished.
 */
class LinkPool {
  /** (content, metadata) -> the tree path holding it in this run, for repeated contents. */
  private readonly exact = new Map<string, Buffer>();
  /** content -> a tree path holding it in this run, for repeated contents. */
  private readonly anyCopy = new Map<string, Buffer>();
  private readonly staged: Set<string>;
  /** Repeated contents this run fetched: no other pool inode of theirs can be expected, so none is looked up. */
  private readonly fresh = new Set<string>();
  private ready = false;
  /** Unique temp names from one random draw and a counter (a random draw per file showed in profiles). */
  private readonly tmpPrefix = `link-${process.pid}-${randomBytes(6).toString('hex')}-`;
  private tmpCount = 0;

  constructor(
    private readonly store: StorePaths,
    private readonly fs: FsmetaStream,
    private readonly opts: MaterializeOptions,
  ) {
    this.staged = opts.staging?.hexes ?? new Set();
  }

  private remember(hex: string): boolean {
    return this.opts.repeated === undefined || this.opts.repeated.has(hex);
  }

  /** The wait for a staged object that is still being fetched. */
  arrival(digest: string): Promise<void> | undefined {
    const hex = digestHex(digest);
    return this.staged.has(hex) ? this.opts.staging?.ready?.(hex) : undefined;
  }

  /** Links `rel` to a pool inode with the file's content and (shifted) metadata, making one if needed. */
  place(e: FileEntry, rel: Buffer): void {
    const m = shiftedMeta(e, this.opts);
    const hex = digestHex(e.digest);
    const remember = this.remember(hex);
    const sig = remember ? `${hex}:${metaSig(m)}` : '';
    if (remember) {
      const same = this.exact.get(sig);
      if (same !== undefined) {
        this.fs.link(rel, same);
        return;
      }
    }
    this.prepare();
    if (this.staged.delete(hex)) {
      const pool = m.xattrs === undefined ? this.store.poolPrimary(hex) : this.store.poolVariant(hex, metaKey(m));
      const staging = this.opts.staging!;
      const inHelper = staging.inHelper?.(hex) === true;
      const data = inHelper ? undefined : staging.take?.(hex);
      if (inHelper) {
        // decoded and verified by the helper, which writes it into the tree and pools it
        this.fs.placeObject(rel, m, pool, hex);
      } else if (data !== undefined) {
        // fetched for this lay-out and still in memory: written into the tree, then pooled
        this.fs.file(rel, m, pool, data);
      } else {
        // fetched for this lay-out onto disk: becomes a pool inode where it lies
        const src = staging.path(hex);
        writeMeta(this.fs, src, m, false);
        this.fs.publish(rel, src, pool);
      }
      if (remember) this.fresh.add(hex);
    } else if (this.fresh.has(hex)) {
      // first laid out by this run, whose pool inode holds another metadata: a copy of ours
      this.publishCopy(rel, this.anyCopy.get(hex)!, m, this.store.poolVariant(hex, metaKey(m)));
    } else {
      const primary = this.store.poolPrimary(hex);
      const pst = statOf(primary);
      if (fits(pst, m)) {
        this.fs.link(rel, primary);
      } else {
        const variant = this.store.poolVariant(hex, metaKey(m));
        if (statOf(variant)?.isFile()) {
          this.fs.link(rel, variant);
        } else {
          const from = this.anyCopy.get(hex) ?? (pst?.isFile() ? primary : undefined);
          if (from === undefined)
            throw new NotFoundError(`object ${e.digest} in the store`, 'pull the environment again: its objects were removed or never fetched');
          this.publishCopy(rel, from, m, variant);
        }
      }
    }
    if (remember) {
      this.exact.set(sig, rel);
      if (!this.anyCopy.has(hex)) this.anyCopy.set(hex, rel);
    }
  }

  /** A new pool inode for `m`: a copy of `from` given its metadata, linked at `rel`, then published. */
  private publishCopy(rel: Buffer, from: Buffer | string, m: Meta, variant: string): void {
    const tmp = join(this.store.tmpDir, `${this.tmpPrefix}${this.tmpCount++}`);
    this.fs.copy(tmp, from);
    writeMeta(this.fs, tmp, m, false);
    this.fs.publish(rel, tmp, variant);
  }

  /** A file holding the content of `e`, to copy from (lay-outs that do not share). */
  content(e: FileEntry): Buffer | string {
    const hex = digestHex(e.digest);
    const here = this.anyCopy.get(hex);
    if (here !== undefined) return here;
    const candidates = [this.store.poolPrimary(hex), this.store.poolVariant(hex, metaKey(shiftedMeta(e, this.opts)))];
    if (this.staged.has(hex)) candidates.push(this.opts.staging!.path(hex));
    for (const c of candidates) {
      if (statOf(c)?.isFile()) {
        this.anyCopy.set(hex, Buffer.from(c));
        return c;
      }
    }
    // A content first pooled with xattrs has only variants, and an export that drops those xattrs
    // (file capabilities) names none of them: any variant holds the content.
    const variant = this.variantOf(hex);
    if (variant !== undefined) {
      this.anyCopy.set(hex, Buffer.from(variant));
      return variant;
    }
    throw new NotFoundError(`object ${e.digest} in the store`, 'pull the environment again: its objects were removed or never fetched');
  }

  /** Some pool variant of a content (the pool is listed once, on the first miss). */
  private variantOf(hex: string): string | undefined {
    if (this.variants === undefined) {
      this.variants = new Map();
      for (const name of readdirSync(this.store.linksDir)) {
        const dot = name.indexOf('.');
        if (dot > 0 && !this.variants.has(name.slice(0, dot))) this.variants.set(name.slice(0, dot), `${this.store.linksDir}/${name}`);
      }
    }
    const v = this.variants.get(hex);
    return v !== undefined && statOf(v)?.isFile() ? v : undefined;
  }

  private variants: Map<string, string> | undefined;

  private prepare(): void {
    if (this.ready) return;
    mkdirSync(this.store.linksDir, { recursive: true });
    mkdirSync(this.store.tmpDir, { recursive: true });
    this.ready = true;
  }
}
