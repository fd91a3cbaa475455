/**
 * Bulk file-system calls through native/fsmeta.c (see there for why it exists), compiled on
 * first use (util/native.ts).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { Socket } from 'node:net';
import type { Writable } from 'node:stream';
import { isAbsolute, join } from 'node:path';
import { type Digest, digestHex } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, MinisandboxError, NotFoundError, UnsafePathError } from '../errors.js';
import { CorruptPackError } from '../pack/errors.js';
import { nameSome, type FrameRef } from '../pack/frame-extract.js';
import type { PackIndexEntry } from '../pack/pack-index.js';
import { XATTR_ROOM } from '../layer/xattr-room.js';
import { type NativeFeature, nativeHelperWith } from '../util/native.js';
import { DIRECT_OWNERS, type Owners, chownIds, commandAs, keepsXattr } from './owners.js';

/** The helper's frame decoding (Z and G records: see native/fsmeta.c), where the host can build it. */
const FRAMES: NativeFeature = {
  name: 'frames',
  cflags: ['-DFSMETA_PACKS', '-pthread'],
  libs: ['-lzstd', '-lcrypto'],
  needs: 'libzstd and libcrypto headers (Debian: apt-get install libzstd-dev libssl-dev)',
};

/** The compiled helper, and whether it decodes frames. */
export function fsmetaHelper(): Promise<{ path: string; has: boolean }> {
  return nativeHelperWith('fsmeta', FRAMES);
}

/** A frame's compressed bytes in a file: the pack itself (at the frame's offset), or a copy (at `at`). */
export interface SpooledFrame {
  file: string;
  at?: number;
}

/** What the helper needs to lay out a manifest itself (`layOutManifest`). */
export interface ManifestLayOut {
  /** The decompressed, digest-checked manifest file. */
  manifest: string;
  /** Names the layer in errors about its manifest. */
  label: string;
  idShift: number;
  whiteouts: 'chardev' | 'xattr';
  overlayXattrNs: 'user' | 'trusted';
  /** The store's pool directory, and a unique prefix for new pool inodes made by copying. */
  linksDir: string;
  tmpPrefix: string;
  /** Contents this pull fetches (their frames follow), and contents named more than once (hex). */
  expected: Iterable<string>;
  repeated: Iterable<string>;
}

/** Largest decoded frame the helper takes (its own limit is higher; the packer makes 4 MiB ones). */
export const MAX_HELPER_FRAME_BYTES = 16 << 20;

/** A frame handed to the helper, remembered to name its pack and objects if it fails. */
interface SentFrame {
  pack: Digest;
  frame: FrameRef;
  wanted: PackIndexEntry[];
}

type Path = string | Buffer;

/** (uid_t)-1: fchown leaves that id as it is (a lay-out whose files stay the caller's). */
const KEEP_ID = 4294967295;

/** Metadata of a regular file as `file` applies it (xattr values base64, as in manifests). */
export interface FileMeta {
  mode: number;
  uid: number;
  gid: number;
  mtime: string;
  xattrs?: Record<string, string> | undefined;
}

const NS_DIGITS = /^\d{10,30}$/;

/**
 * Seconds and nanoseconds of a decimal nanosecond count, as decimal strings. Cut from the string
 * for the usual positive times (a BigInt division per file showed in profiles).
 */
export function splitNs(ns: string): [string, string] {
  if (NS_DIGITS.test(ns)) return [ns.slice(0, -9), ns.slice(-9)];
  let sec = BigInt(ns) / 1_000_000_000n;
  let nsec = BigInt(ns) % 1_000_000_000n;
  if (nsec < 0n) {
    nsec += 1_000_000_000n;
    sec -= 1n;
  }
  return [sec.toString(), nsec.toString()];
}

/** Records are collected here and handed to the pipe in pieces of about this size. */
const PIECE_BYTES = 256 << 10;
/** Records handed over before a piece is full are copied out up to this size. */
const SMALL_PIECE = 16 << 10;
/** Written pieces' buffers kept for reuse. */
const SPARE_PIECES = 24;
/** Bytes node may queue for the helper's pipe before a pump waits (bounds memory). */
const QUEUED_BYTES = 8 << 20;

/**
 * One helper process for a whole lay-out, fed records as they are made: node keeps parsing
 * while the helper does the file-system calls, on the other core. Records apply in order, and
 * the helper stops at the first failure, which `close` (or the next `pump`) reports.
 * Relative paths are resolved against the directory given to `start`.
 */
export class FsmetaStream {
  private buf: Buffer = Buffer.allocUnsafeSlow(PIECE_BYTES * 2);
  private readonly spares: Buffer[] = [];
  private pos = 0;
  private stderr = '';
  private readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;
  private closed = false;
  private readonly frames: SentFrame[] = [];
  private manifestLabel: string | undefined;

  private constructor(
    private readonly child: ChildProcess,
    /** The directory relative paths are resolved against (named in errors). */
    private readonly cwd: string,
    /** Where records go: a pipe of the helper's own (see native/fsmeta.c --pipe), or its stdin. */
    private readonly input: Writable,
    private readonly owners: Owners,
    /** The helper decodes and verifies pack frames itself (`frame`, `placeObject`). */
    readonly decodesFrames: boolean,
  ) {
    child.stderr!.on('data', (d: Buffer) => {
      if (this.stderr.length < 4096) this.stderr += d.toString();
    });
    input.on('error', () => {
      // reported through the exit code and stderr
    });
    this.exited = new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => {
        this.exitCode = code;
        resolve(code);
      });
    });
    this.exited.catch(() => undefined);
  }

  /** `owners`: how ids given to `chown` become owners (see owners.ts); the helper runs accordingly. */
  static async start(cwd: string, owners: Owners = DIRECT_OWNERS): Promise<FsmetaStream> {
    const { path: helper, has } = await fsmetaHelper();
    const [cmd, ...args] = await commandAs(owners, [helper, cwd, '--pipe']);
    const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let input: Writable;
    try {
      input = await openPipe(child);
    } catch {
      // no /proc to open the helper's pipe through: its stdin (a socket) works, more slowly
      child.kill('SIGKILL');
      const [pcmd, ...pargs] = await commandAs(owners, [helper, cwd]);
      const plain = spawn(pcmd!, pargs, { stdio: ['pipe', 'ignore', 'pipe'] });
      return new FsmetaStream(plain, cwd, plain.stdin!, owners, has);
    }
    const stream = new FsmetaStream(child, cwd, input, owners, has);
    stream.field('H');
    stream.field('');
    // at once: the helper holds the write end of its pipe until it reads this (see native/fsmeta.c)
    stream.flush();
    return stream;
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }

  private field(f: Path): void {
    if (typeof f === 'string') {
      this.room(f.length * 3 + 1);
      this.pos += this.buf.write(f, this.pos, 'utf8');
    } else {
      this.room(f.length + 1);
      f.copy(this.buf, this.pos);
      this.pos += f.length;
    }
    this.buf[this.pos++] = 0;
  }

  private rec(op: string, path: Path, ...fields: Path[]): void {
    this.field(op);
    this.field(path);
    for (const f of fields) this.field(f);
  }

  /** Host ids: translated for a helper in a user namespace. */
  chown(path: Path, uid: number, gid: number): void {
    const ids = chownIds(this.owners, uid, gid);
    if (ids !== null) this.rec('O', path, String(ids[0]), String(ids[1]));
  }
  chmod(path: Path, mode: number): void {
    this.rec('M', path, mode.toString(8));
  }
  /** Sets atime and mtime to `ns` nanoseconds since the epoch (a decimal string), without following symlinks. */
  utimes(path: Path, ns: string): void {
    const [sec, nsec] = splitNs(ns);
    this.rec('T', path, sec, nsec);
  }
  setxattr(path: Path, name: string, value: Buffer): void {
    if (!keepsXattr(this.owners, name)) return;
    this.rec('X', path, name, value.toString('hex'));
  }
  mknod(path: Path, type: 'c' | 'b' | 'p', mode: number, major = 0, minor = 0): void {
    this.rec('N', path, type, mode.toString(8), String(major), String(minor));
  }
  mkdir(path: Path, mode: number): void {
    this.rec('D', path, mode.toString(8));
  }
  symlink(path: Path, target: Buffer): void {
    this.rec('S', path, target);
  }
  link(path: Path, src: Path): void {
    this.rec('L', path, src);
  }
  copy(path: Path, src: Path): void {
    this.rec('C', path, src);
  }
  createEmpty(path: Path): void {
    this.rec('E', path);
  }
  /** Creates `path` holding `data` (copied now: the caller may reuse its buffer). */
  write(path: string, data: Uint8Array): void {
    this.rec('W', path);
    this.payload(data);
  }

  /** Appends `data` to `path`, creating it (copied now: the caller may reuse its buffer). */
  append(path: string, data: Uint8Array): void {
    this.rec('A', path);
    this.payload(data);
  }

  /**
   * A length field and the bytes after it, ending a record. The bytes are copied piece by piece
   * (a record may span pieces: the helper reads a stream), so a large payload never grows a
   * buffer: grown ones, fresh memory each time, were most of a pull's allocations (measured).
   */
  private payload(data: Uint8Array): void {
    this.field(String(data.length));
    for (let done = 0; done < data.length; ) {
      const n = Math.min(data.length - done, this.buf.length - this.pos);
      this.buf.set(data.subarray(done, done + n), this.pos);
      this.pos += n;
      done += n;
      if (this.pos === this.buf.length) {
        this.flush();
        // nothing is taken once the helper is gone (its failure is reported by pump or close)
        this.pos = 0;
      }
    }
    if (this.pos >= PIECE_BYTES) this.flush();
  }

  rename(path: string, dest: string): void {
    this.rec('R', path, dest);
  }

  /** Links `src` to `path`, then moves `src` to `pool` unless something is already there. */
  publish(path: Path, src: Path, pool: Path): void {
    this.rec('P', path, src, pool);
  }

  /**
   * Creates `path` holding `data` with its whole metadata, then links it as `pool` unless `pool`
   * is empty or already exists: what W, O, M, X, T and a link do, through one open file.
   */
  file(path: Path, m: FileMeta, pool: string, data: Uint8Array): void {
    this.fileRecord('F', path, m, pool);
    this.payload(data);
  }

  private fileRecord(op: 'F' | 'G', path: Path, m: FileMeta, pool: string): void {
    const [sec, nsec] = splitNs(m.mtime);
    const ids = chownIds(this.owners, m.uid, m.gid);
    this.rec(op, path, String(ids?.[0] ?? KEEP_ID), String(ids?.[1] ?? KEEP_ID), m.mode.toString(8), sec, nsec, pool);
    const xattrs =
      m.xattrs === undefined
        ? []
        : Object.entries(m.xattrs)
            .filter(([name]) => keepsXattr(this.owners, name))
            .sort(([a], [b]) => (a < b ? -1 : 1));
    this.field(String(xattrs.length));
    for (const [name, value] of xattrs) {
      this.field(name);
      this.field(Buffer.from(value, 'base64').toString('hex'));
    }
  }

  /**
   * Hands over a pack frame's compressed bytes (copied now) for the helper to decode and to check
   * the digest of each `wanted` object (sorted by offset), which `placeObject` then places.
   * Objects the lay-out does not reach soon go to `spillTo`'s directory.
   */
  frame(pack: Digest, frame: FrameRef, wanted: PackIndexEntry[], compressed: Uint8Array | SpooledFrame): void {
    const id = this.frames.push({ pack, frame, wanted }) - 1;
    this.rec('Z', String(id), String(frame.rawLength), String(wanted.length));
    for (const w of wanted) {
      this.field(digestHex(w.digest));
      this.field(String(w.offset));
      this.field(String(w.size));
    }
    if ('file' in compressed) {
      // the helper reads the frame itself: its bytes never pass through node or the pipe, which
      // then carries only small records (several thousand files' worth fit in it)
      this.field(compressed.file);
      this.field(String(compressed.at ?? frame.offset));
      this.field(String(frame.length));
      // handed over at once: the decoder starts on it instead of waiting for a full piece of records
      this.flush();
    } else {
      this.field('');
      this.field('0');
      this.payload(compressed);
    }
  }

  /**
   * Where the helper writes decoded objects that do not wait in memory for the lay-out, and how
   * many decoded bytes may (0: none; frames are then written out as they are decoded).
   */
  spillTo(dir: string, budget: number): void {
    this.rec('Q', dir, String(budget));
  }

  /**
   * Has the helper read, check and lay out a whole manifest on a thread of its own (Y record:
   * see native/fsmeta-manifest.c), for the manifests `helperLaysOut` accepts; frames of the
   * objects it fetches follow. Only with frames built in, and for owners as given (`direct`).
   */
  layOutManifest(l: ManifestLayOut): void {
    this.manifestLabel = l.label;
    this.rec('Y', l.manifest, String(l.idShift), l.whiteouts === 'chardev' ? 'c' : 'x', l.overlayXattrNs, l.linksDir, l.tmpPrefix);
    this.field([...l.expected].join(''));
    this.field([...l.repeated].join(''));
  }

  /** Like `file`, with the bytes of object `hex` of a frame handed over earlier. */
  placeObject(path: Path, m: FileMeta, pool: string, hex: string): void {
    this.fileRecord('G', path, m, pool);
    this.field(hex);
  }

  /** More is queued for the helper than a pump lets through: pump before adding much more. */
  get backlogged(): boolean {
    return this.input.writableLength > QUEUED_BYTES;
  }

  /** Hands what has collected to the helper, waiting while its pipe is full. */
  async pump(): Promise<void> {
    if (this.exitCode !== undefined) throw this.failure();
    if (this.pos >= PIECE_BYTES) this.flush();
    if (this.input.writableLength > QUEUED_BYTES) await this.send();
  }

  private async send(): Promise<void> {
    if (this.exitCode !== undefined || this.closed) throw this.failure();
    this.flush();
    const stdin = this.input;
    // Node queues what the pipe cannot take yet: wait only once a few pieces are queued, so
    // that the helper always has work and node is not woken for every piece.
    if (stdin.writableLength > QUEUED_BYTES) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          stdin.off('drain', done);
          this.child.off('close', done);
          resolve();
        };
        stdin.on('drain', done);
        this.child.on('close', done);
      });
      if (this.exitCode !== undefined) throw this.failure();
    }
  }

  /**
   * Hands the collected records to the pipe without waiting (pump or close then wait for it).
   * The filled buffer itself goes, and comes back for reuse once written: a copy per piece
   * (fresh memory each time) showed in profiles. A few records sent early go as a copy: the
   * buffer stays to fill.
   */
  flush(): void {
    if (this.pos === 0 || this.exitCode !== undefined || this.closed) return;
    if (this.pos < SMALL_PIECE) {
      this.input.write(Buffer.from(this.buf.subarray(0, this.pos)));
      this.pos = 0;
      return;
    }
    const full = this.buf;
    const piece = full.subarray(0, this.pos);
    this.buf = this.spares.pop() ?? Buffer.allocUnsafeSlow(PIECE_BYTES * 2);
    this.pos = 0;
    this.input.write(piece, () => {
      if (this.spares.length < SPARE_PIECES && full.length === PIECE_BYTES * 2) this.spares.push(full);
    });
  }

  /** Sends the rest, waits for the helper to apply everything; throws its first failure. */
  async close(): Promise<void> {
    await this.send();
    this.closed = true;
    this.input.end();
    const code = await this.exited;
    if (code !== 0) throw this.failure();
  }

  /** Stops the helper after an error elsewhere, so nothing runs on behind the caller's back. */
  async abort(): Promise<void> {
    if (this.exitCode === undefined) this.child.kill('SIGKILL');
    this.input.destroy();
    await this.exited.catch(() => undefined);
  }

  private failure(): MinisandboxError {
    const err = this.stderr.trim() || `fsmeta exited with ${String(this.exitCode)}`;
    const bad = /^fsmeta: frame (\d+): (.*)$/m.exec(err);
    const sent = bad === null ? undefined : this.frames[Number(bad[1])];
    if (sent !== undefined) return frameFailure(sent, bad![2]!);
    const manifest = /^fsmeta: manifest: (invalid|unsafe|missing)\t(.*)$/m.exec(err);
    if (manifest !== null) return manifestFailure(this.manifestLabel ?? 'manifest', manifest[1]!, manifest[2]!);
    const xattr = /^fsmeta: setxattr (.*)\t([^\t]*)\t(\d+): (.*)$/m.exec(err);
    if (xattr !== null) return xattrFailure(this.cwd, xattr[1]!, xattr[2]!, Number(xattr[3]), xattr[4]!);
    return new MinisandboxError('FS_METADATA', err, { hint: 'check free space and permissions of the store directory' });
  }
}

/**
 * An attribute the store's file system refused. ext4 answers one larger than its attribute block
 * with ENOSPC (E2BIG or ERANGE elsewhere), which "check free space" misreported as a full disk.
 */
function xattrFailure(cwd: string, path: string, name: string, bytes: number, why: string): MinisandboxError {
  const where = isAbsolute(path) ? path : join(cwd, path);
  const size = /No space left|Argument list too long|out of range/i.test(why);
  return new MinisandboxError('FS_METADATA', `the store's file system did not take extended attribute ${name} (${bytes} bytes) of ${where}: ${why}`, {
    hint: size
      ? `ext4 keeps all of a file's attributes in one block (4 KiB by default; imports refuse more than ${XATTR_ROOM} bytes of them): ` +
        'keep the store on a file system that takes larger ones (xfs, btrfs, tmpfs) or rebuild the layer without the attribute; ' +
        'if the disk is full, free space'
      : "check that the store's file system supports extended attributes in this namespace",
  });
}

/** The helper's report on a frame, as the error node's own decoding would have thrown. */
function frameFailure(sent: SentFrame, why: string): MinisandboxError {
  const mismatch = /^object ([0-9a-f]{64}) has digest ([0-9a-f]{64})$/.exec(why);
  if (mismatch !== null)
    return new DigestMismatchError(`object sha256:${mismatch[1]!} in pack ${sent.pack}`, `sha256:${mismatch[1]!}`, `sha256:${mismatch[2]!}`);
  return new CorruptPackError(`pack ${sent.pack}, frame at ${sent.frame.offset}: ${why}; objects not extracted: ${nameSome(sent.wanted.map((w) => w.digest))}`);
}

/** The helper's report on the manifest it lays out, as node's reader and lay-out would have thrown it. */
function manifestFailure(label: string, kind: string, detail: string): MinisandboxError {
  if (kind === 'unsafe') {
    const tab = detail.indexOf('\t');
    return new UnsafePathError(detail.slice(0, tab), detail.slice(tab + 1));
  }
  if (kind === 'missing')
    return new NotFoundError(`object sha256:${detail} in the store`, 'pull the environment again: its objects were removed or never fetched');
  return new InvalidInputError(`${label}: ${detail}`);
}

/** The write end of the pipe a `--pipe` helper made, opened through /proc (see native/fsmeta.c). */
async function openPipe(child: ChildProcess): Promise<Writable> {
  const line = await new Promise<string>((resolve, reject) => {
    let got = '';
    const onData = (d: Buffer): void => {
      got += d.toString();
      const nl = got.indexOf('\n');
      if (nl < 0) return;
      child.stdout!.off('data', onData);
      resolve(got.slice(0, nl));
    };
    child.stdout!.on('data', onData);
    child.once('error', reject);
    child.once('close', () => reject(new Error('fsmeta exited before its pipe was ready')));
  });
  if (!/^\d+$/.test(line) || child.pid === undefined) throw new Error(`fsmeta: unexpected pipe line ${JSON.stringify(line)}`);
  child.stdout!.resume();
  // O_CLOEXEC (libuv's default): no other child may hold this end, or the helper never sees the end
  const fd = openSync(`/proc/${child.pid}/fd/${line}`, 'w');
  return new Socket({ fd, readable: false, writable: true });
}
