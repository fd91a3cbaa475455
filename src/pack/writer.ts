/**
 * Writes objects (file contents already hashed by capture) into packs: zstd frames whose
 * concatenated decompression is one tar stream of `objects/<hex>` entries.
 *
 * Pipeline: `add` reads small files (inline, or ahead for larger ones) -> tar entries (headers
 * by tar-stream) are gathered into a frame of about 4 MiB, cut only between entries -> frames
 * are compressed on worker threads while the next one fills; a large object's frame is
 * compressed as a stream by zstd's threads while its file is read -> compressed frames are
 * appended in order to the pack file and hashed on the way. Memory stays at a few frames
 * whatever the object sizes.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { closeSync, openSync, read, readSync } from 'node:fs';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { digestHex, type Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, MinisandboxError } from '../errors.js';
import { Compressors } from './compressors.js';
import { ReadRing } from './read-ring.js';
import { SourceChangedError } from './errors.js';
import { encodePackIndex, PACK_INDEX_FORMAT, TAR_END_LENGTH, tarEntryLength, TAR_BLOCK, type PackFrame, type PackObject } from './pack-index.js';
import { COMPRESSION_LEVEL, FRAME_TARGET_BYTES, PACK_TARGET_BYTES, STREAM_CHUNK_BYTES } from './settings.js';
import type { StreamFrameCompressor } from './stream-compressor.js';
import binding from 'zstd-napi/binding.js';
import { objectHeader, padding } from './tar-header.js';

export interface PackSource {
  digest: Digest;
  size: number;
  /** Local file holding the object's bytes (named in errors; opened by path only without `open`). */
  path: string | Buffer;
  /**
   * Opens the object's file for reading, where a path could lead elsewhere by now (a live
   * sandbox's upper: see layer/capture.ts). Called synchronously within `add`.
   */
  open?: () => number;
}

/** The source's file, opened its own way or by path. */
function openSource(obj: PackSource): number {
  if (obj.open === undefined) return openSync(obj.path, 'r');
  try {
    return obj.open();
  } catch (e) {
    throw new SourceChangedError(obj.path.toString(), `cannot be opened again: ${(e as Error).message}`);
  }
}

const readFd = promisify(read);

/** Reads from `fd` at `position` asynchronously: the FileHandle API cannot take an fd opened elsewhere. */
async function readAt(fd: number, buf: Buffer, offset: number, length: number, position: number): Promise<number> {
  return (await readFd(fd, buf, offset, length, position)).bytesRead;
}

export interface WrittenPack {
  /** The finished pack file, named `<hex>.pack` in the temp directory; the caller uploads and removes it. */
  packPath: string;
  pack: Digest;
  /** The stored (compressed) index blob. */
  indexBytes: Buffer;
  index: Digest;
  objects: number;
  /** Sum of the objects' sizes. */
  rawBytes: number;
  /** Size of the pack file. */
  packBytes: number;
}

export interface PackWriterOptions {
  /** Directory for pack files (created by the caller; same filesystem as where they go next helps). */
  tempDir: string;
  /** Compressed size at which a new pack is started (default 64 MiB). */
  targetPackBytes?: number;
  /** Uncompressed size of frames of small objects (default 4 MiB). */
  frameBytes?: number;
  level?: number;
  /** Compression worker threads for small-object frames (default: cores, at most 2). */
  workers?: number;
  /** Re-hash every object while reading it and fail if it differs from the stated digest. */
  verifyDigests?: boolean;
}

interface Settings {
  tempDir: string;
  targetPackBytes: number;
  frameBytes: number;
  level: number;
  workers: number;
  verifyDigests: boolean;
}

/** Files read ahead of the packer: enough to hide read latency, bounded to about a frame (in one ReadRing). */
const READ_AHEAD_FILES = 64;
const READ_AHEAD_BYTES = 4 << 20;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

/** Files up to this size are read synchronously (see readSmallSync). */
const SYNC_READ_BYTES = 64 << 10;

interface Ahead {
  obj: PackSource;
  data: Promise<Buffer>;
}

export class PackWriter {
  private readonly settings: Settings;
  private readonly z: Compressors;
  private builder: PackBuilder | null = null;
  private readonly written: WrittenPack[] = [];
  private readonly ahead: Ahead[] = [];
  private readonly ring: ReadRing;
  private busy = false;
  private closed = false;

  constructor(opts: PackWriterOptions) {
    const workers = opts.workers ?? Math.max(1, Math.min(2, availableParallelism()));
    this.settings = {
      tempDir: opts.tempDir,
      targetPackBytes: opts.targetPackBytes ?? PACK_TARGET_BYTES,
      frameBytes: opts.frameBytes ?? FRAME_TARGET_BYTES,
      level: opts.level ?? COMPRESSION_LEVEL,
      workers,
      verifyDigests: opts.verifyDigests ?? false,
    };
    if (!(this.settings.frameBytes >= TAR_BLOCK) || !(this.settings.targetPackBytes >= 1)) {
      throw new InvalidInputError('pack writer: frameBytes must be at least 512 and targetPackBytes positive');
    }
    this.ring = new ReadRing(Math.max(READ_AHEAD_BYTES, this.settings.frameBytes + 1));
    this.z = new Compressors(workers, this.settings.level, this.settings.frameBytes);
  }

  /**
   * Queues one object. Await each call before the next: the writer reads ahead internally.
   * Adding a digest twice to the same pack stores it once.
   */
  async add(obj: PackSource): Promise<void> {
    // A plain regex test: zod's parse per object showed up at ~4% of packing small files.
    if (!DIGEST_RE.test(obj.digest))
      throw new InvalidInputError(`invalid object digest ${JSON.stringify(obj.digest)}`, 'digests look like sha256:<64 hex digits>');
    if (!Number.isSafeInteger(obj.size) || obj.size < 0) throw new InvalidInputError(`object ${obj.digest}: invalid size ${obj.size}`);
    await this.exclusive(async () => {
      if (obj.size <= SYNC_READ_BYTES) {
        // Read inline, straight into the frame being filled (no intermediate buffer or copy).
        await (await this.target()).addSmallFile(obj);
      } else if (obj.size <= this.settings.frameBytes) {
        // one byte more than expected reveals a file that grew
        let into = this.ring.take(obj.size + 1);
        while (into === undefined) {
          await this.drainOne();
          into = this.ring.take(obj.size + 1);
        }
        const data = readMedium(obj, this.settings.verifyDigests, into);
        data.catch(() => undefined); // surfaced when drained; avoid an unhandled rejection meanwhile
        this.ahead.push({ obj, data });
        while (this.ahead.length > READ_AHEAD_FILES) await this.drainOne();
      } else {
        while (this.ahead.length > 0) await this.drainOne();
        await (await this.target()).addStream(obj);
      }
    });
  }

  /**
   * Queues an object whose bytes the caller holds (a file read from an image layer's tar stream,
   * which has no file on disk to read again), at most one frame; copied, so `data` may be reused.
   */
  async addData(obj: { digest: Digest; size: number }, data: Buffer): Promise<void> {
    if (!DIGEST_RE.test(obj.digest))
      throw new InvalidInputError(`invalid object digest ${JSON.stringify(obj.digest)}`, 'digests look like sha256:<64 hex digits>');
    if (data.length !== obj.size || obj.size > this.settings.frameBytes)
      throw new InvalidInputError(`object ${obj.digest}: addData takes whole objects of at most a frame (${obj.size} bytes)`);
    await this.exclusive(async () => {
      await (await this.target()).addBuffer({ ...obj, path: '(memory)' }, data);
    });
  }

  /** Finishes the last pack and returns every pack written, in order. */
  async finish(): Promise<WrittenPack[]> {
    await this.exclusive(async () => {
      try {
        while (this.ahead.length > 0) await this.drainOne();
        if (this.builder) this.written.push(await this.builder.finish());
        this.builder = null;
      } finally {
        this.closed = true;
        await this.z.close();
      }
    });
    return this.written;
  }

  /** Stops and removes the unfinished pack (finished ones stay for the caller to clean up). */
  async abort(): Promise<void> {
    this.closed = true;
    for (const a of this.ahead.splice(0)) await a.data.catch(() => undefined);
    await this.builder?.abort();
    this.builder = null;
    await this.z.close();
  }

  private async exclusive(f: () => Promise<void>): Promise<void> {
    if (this.closed) throw new MinisandboxError('PACK_WRITER_CLOSED', 'the pack writer is finished or aborted', { hint: 'create a new PackWriter' });
    if (this.busy)
      throw new MinisandboxError('PACK_WRITER_BUSY', 'PackWriter.add called again before the previous call settled', {
        hint: 'await each add() before the next',
      });
    this.busy = true;
    try {
      await f();
    } catch (e) {
      await this.abort().catch(() => undefined);
      throw e;
    } finally {
      this.busy = false;
    }
  }

  private async drainOne(): Promise<void> {
    const a = this.ahead.shift();
    if (!a) return;
    const data = await a.data;
    await (await this.target()).addBuffer(a.obj, data);
    this.ring.release();
  }

  /** The pack to add to, rolling over when the current one reached its target size. */
  private async target(): Promise<PackBuilder> {
    if (this.builder && this.builder.estimatedBytes() >= this.settings.targetPackBytes) {
      this.written.push(await this.builder.finish());
      this.builder = null;
    }
    this.builder ??= await PackBuilder.create(this.settings, this.z);
    return this.builder;
  }
}

/**
 * Reads a file of up to a frame whole into `buf` (its size + 1 bytes: one more than expected
 * reveals a file that grew), asynchronously (reads of several files overlap).
 */
async function readMedium(obj: PackSource, verify: boolean, buf: Buffer): Promise<Buffer> {
  const fd = openSource(obj);
  try {
    let got = 0;
    for (;;) {
      const bytesRead = await readAt(fd, buf, got, buf.length - got, got);
      if (bytesRead === 0) break;
      got += bytesRead;
      if (got === buf.length) break;
    }
    if (got !== obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found ${got === buf.length ? 'more' : got}`);
    const data = buf.subarray(0, obj.size);
    if (verify) checkDigest(obj, createHash('sha256').update(data));
    return data;
  } finally {
    closeSync(fd);
  }
}

function checkDigest(obj: PackSource, h: Hash): void {
  const actual = `sha256:${h.digest('hex')}`;
  if (actual !== obj.digest) throw new DigestMismatchError(`${obj.path} (changed since capture?)`, obj.digest, actual);
}

/** One pack file being written. */
class PackBuilder {
  private readonly hash = createHash('sha256');
  private readonly objects: PackObject[] = [];
  private readonly digests = new Set<Digest>();
  private readonly frames: PackFrame[] = [];
  private rawBytes = 0;
  /** Index of the frame being filled. */
  private frameIndex = 0;
  /** Tar bytes of the frame being filled (small objects); handed to a worker when it is cut. */
  private frame: Buffer | null = null;
  private openLength = 0;
  private packBytes = 0;
  private pendingRaw = 0;
  private readonly inflight: Promise<void>[] = [];
  private failure: unknown = null;

  private constructor(
    private readonly s: Settings,
    private readonly z: Compressors,
    private readonly fh: FileHandle,
    private readonly tmpPath: string,
  ) {}

  static async create(s: Settings, z: Compressors): Promise<PackBuilder> {
    const tmpPath = join(s.tempDir, `.pack-${process.pid}-${randomBytes(6).toString('hex')}.tmp`);
    const fh = await open(tmpPath, 'wx');
    return new PackBuilder(s, z, fh, tmpPath);
  }

  /** Compressed bytes written plus a guess for what is still being compressed. */
  estimatedBytes(): number {
    return this.packBytes + Math.ceil((this.pendingRaw + this.openLength) / 4);
  }

  async addBuffer(obj: PackSource, data: Buffer): Promise<void> {
    if (!this.claim(obj)) return;
    const at = await this.place(obj);
    data.copy(this.frame!, at + TAR_BLOCK);
    this.seal(obj, at);
  }

  /**
   * Reads a small file straight into the frame buffer. Synchronous on purpose: for files of a few
   * KB the per-call cost dominates, and three thread-pool round trips per file (open, read, close)
   * cost several times the work; compression runs on other threads meanwhile.
   */
  async addSmallFile(obj: PackSource): Promise<void> {
    if (!this.claim(obj)) return;
    const at = await this.place(obj);
    const frame = this.frame!;
    const start = at + TAR_BLOCK;
    const fd = openSource(obj);
    try {
      // One byte more than expected (landing in the padding) reveals a file that grew.
      const want = obj.size + 1;
      let got = 0;
      for (;;) {
        const n = readSync(fd, frame, start + got, want - got, got);
        if (n === 0) break;
        got += n;
        if (got === want) break;
      }
      if (got !== obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found ${got === want ? 'more' : got}`);
    } finally {
      closeSync(fd);
    }
    if (this.s.verifyDigests) checkDigest(obj, createHash('sha256').update(frame.subarray(start, start + obj.size)));
    this.seal(obj, at);
  }

  /** Makes room for an entry in the frame being filled; returns where its header goes. */
  private async place(obj: PackSource): Promise<number> {
    const len = tarEntryLength(obj.size);
    if (this.openLength > 0 && this.openLength + len > this.s.frameBytes) await this.cutFrame();
    // Room for the largest entry a frame takes, the byte that detects growth and the end marker.
    this.frame ??= this.z.takeFrame(Math.max(this.s.frameBytes, len) + 2 * TAR_END_LENGTH);
    return this.openLength;
  }

  /** Writes the entry's header and padding around its data and records the object. */
  private seal(obj: PackSource, at: number): void {
    const frame = this.frame!;
    objectHeader(obj.digest, obj.size).copy(frame, at);
    const len = tarEntryLength(obj.size);
    frame.fill(0, at + TAR_BLOCK + obj.size, at + len);
    this.objects.push({ digest: obj.digest, size: obj.size, frame: this.frameIndex, offset: at + TAR_BLOCK });
    this.openLength = at + len;
  }

  /** A large object gets a frame of its own, compressed as a stream while the file is read. */
  async addStream(obj: PackSource): Promise<void> {
    if (!this.claim(obj)) return;
    if (this.openLength > 0) await this.cutFrame();
    // Earlier frames reach the file first: this frame is appended as it compresses.
    await Promise.all(this.inflight.splice(0));
    this.objects.push({ digest: obj.digest, size: obj.size, frame: this.frameIndex, offset: TAR_BLOCK });
    const start = this.packBytes;
    const z = this.z.streaming();
    try {
      await this.streamObject(z, obj);
    } catch (e) {
      // a context left mid-frame must not start the next object's frame
      this.z.discardStreaming();
      throw e;
    }
    this.frames.push({ offset: start, length: this.packBytes - start, rawLength: tarEntryLength(obj.size) });
    this.frameIndex++;
  }

  private async streamObject(z: StreamFrameCompressor, obj: PackSource): Promise<void> {
    const sink = (piece: Buffer): Promise<void> => this.append(piece);
    await z.write(objectHeader(obj.digest, obj.size), sink);
    const fd = openSource(obj);
    try {
      const h = this.s.verifyDigests ? createHash('sha256') : null;
      // Reused: the compressor copies its input before write() settles.
      const buf = Buffer.allocUnsafe(STREAM_CHUNK_BYTES);
      let got = 0;
      for (;;) {
        const bytesRead = await readAt(fd, buf, 0, Math.min(buf.length, obj.size - got + 1), got);
        if (bytesRead === 0) break;
        got += bytesRead;
        if (got > obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found more`);
        const piece = buf.subarray(0, bytesRead);
        h?.update(piece);
        await z.write(piece, sink);
      }
      if (got !== obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found ${got}`);
      if (h) checkDigest(obj, h);
    } finally {
      closeSync(fd);
    }
    await z.write(padding(obj.size), sink);
    await z.end(sink);
  }

  async finish(): Promise<WrittenPack> {
    this.frame ??= Buffer.allocUnsafeSlow(2 * TAR_END_LENGTH);
    this.frame.fill(0, this.openLength, this.openLength + TAR_END_LENGTH);
    this.openLength += TAR_END_LENGTH;
    await this.cutFrame(true);
    await Promise.all(this.inflight.splice(0));
    if (this.failure) throw this.failure;
    await this.fh.close();
    const pack: Digest = `sha256:${this.hash.digest('hex')}`;
    const packPath = join(this.s.tempDir, `${digestHex(pack)}.pack`);
    await rename(this.tmpPath, packPath);
    const { bytes, digest } = encodePackIndex({
      format: PACK_INDEX_FORMAT,
      pack,
      packSize: this.packBytes,
      frames: this.frames,
      objects: this.objects,
    });
    return { packPath, pack, indexBytes: bytes, index: digest, objects: this.objects.length, rawBytes: this.rawBytes, packBytes: this.packBytes };
  }

  async abort(): Promise<void> {
    this.failure ??= new MinisandboxError('PACK_WRITER_CLOSED', 'the pack writer was aborted');
    await Promise.allSettled(this.inflight.splice(0));
    await this.fh.close().catch(() => undefined);
    await rm(this.tmpPath, { force: true });
  }

  /** False when the pack already holds the object. */
  private claim(obj: PackSource): boolean {
    if (this.failure) throw this.failure;
    if (this.digests.has(obj.digest)) return false;
    this.digests.add(obj.digest);
    this.rawBytes += obj.size;
    return true;
  }

  /**
   * Sends the frame being filled to a compression worker; frames reach the file in order. A pack
   * of one frame (a push with little new) is compressed right here: starting the workers would
   * cost more than the frame (about 25 ms and 100 ms of CPU for two, against ~20 ms for 4 MiB).
   */
  private async cutFrame(last = false): Promise<void> {
    const rawLength = this.openLength;
    const inline = last && this.frameIndex === 0 && !this.z.poolStarted;
    const compressed = inline
      ? Promise.resolve(compressFrame(this.frame!.subarray(0, rawLength), this.s.level))
      : this.z.pool.compress(this.frame!, rawLength, true);
    this.frame = null; // moved to the worker
    this.openLength = 0;
    this.frameIndex++;
    this.pendingRaw += rawLength;
    const previous = this.inflight[this.inflight.length - 1] ?? Promise.resolve();
    const written = (async () => {
      const out = await compressed;
      await previous;
      // Frames are recorded in file order: the previous frame's push happened before this one's.
      const start = this.packBytes;
      await this.append(out);
      this.z.giveBack(out);
      this.pendingRaw -= rawLength;
      this.frames.push({ offset: start, length: out.length, rawLength });
    })();
    written.catch((e: unknown) => {
      this.failure ??= e;
    });
    this.inflight.push(written);
    // Bounded memory: one frame per worker plus one queued (so no worker idles while the oldest
    // is written), plus the one being filled.
    while (this.inflight.length > this.s.workers + 1) await this.inflight.shift();
  }

  private async append(b: Buffer): Promise<void> {
    this.hash.update(b);
    let done = 0;
    while (done < b.length) {
      const { bytesWritten } = await this.fh.write(b, done, b.length - done);
      done += bytesWritten;
    }
    this.packBytes += b.length;
  }
}

/** One zstd frame on this thread, with the parameters the compression workers use (compress-pool.ts). */
function compressFrame(data: Buffer, level: number): Buffer {
  const cctx = new binding.CCtx();
  cctx.setParameter(binding.CParameter.compressionLevel, level);
  const out = Buffer.allocUnsafe(binding.compressBound(data.length));
  return out.subarray(0, cctx.compress2(out, data));
}
