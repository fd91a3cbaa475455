/**
 * Writes objects (file contents already hashed by capture) into packs: zstd frames whose
 * concatenated decompression is one tar stream of `objects/<hex>` entries.
 *
 * Pipeline: the caller's `add` starts reading small files ahead (libuv threads) -> entries go
 * into a tar-stream packer -> the packer's output is cut into frames at entry boundaries ->
 * small-object frames are compressed on worker threads, a large object's frame is compressed as
 * a stream by zstd's threads -> compressed frames are appended in order to the pack file and
 * hashed on the way. Memory stays at a few frames whatever the object sizes.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { pack as tarPack, type Pack } from 'tar-stream';
import { DigestSchema, digestHex, type Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, MinisandboxError } from '../errors.js';
import { CompressPool } from './compress-pool.js';
import { SourceChangedError } from './errors.js';
import {
  encodePackIndex,
  PACK_INDEX_FORMAT,
  TAR_END_LENGTH,
  tarEntryLength,
  TAR_BLOCK,
  type PackFrame,
  type PackObject,
} from './pack-index.js';
import {
  COMPRESSION_LEVEL,
  FRAME_TARGET_BYTES,
  LARGE_FRAME_WORKERS,
  PACK_TARGET_BYTES,
  STREAM_CHUNK_BYTES,
} from './settings.js';
import { StreamFrameCompressor } from './stream-compressor.js';

export interface PackSource {
  digest: Digest;
  size: number;
  /** Local file holding the object's bytes. */
  path: string | Buffer;
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

/** Small files read ahead of the packer: enough to hide read latency, bounded to about a frame. */
const READ_AHEAD_FILES = 64;
const READ_AHEAD_BYTES = 4 << 20;

interface Ahead {
  obj: PackSource;
  data: Promise<Buffer>;
}

export class PackWriter {
  private readonly settings: Settings;
  private readonly pool: CompressPool;
  private builder: PackBuilder | null = null;
  private readonly written: WrittenPack[] = [];
  private readonly ahead: Ahead[] = [];
  private aheadBytes = 0;
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
    this.pool = new CompressPool({ workers, level: this.settings.level });
  }

  /**
   * Queues one object. Await each call before the next: the writer reads ahead internally.
   * Adding a digest twice to the same pack stores it once.
   */
  async add(obj: PackSource): Promise<void> {
    DigestSchema.parse(obj.digest);
    if (!Number.isSafeInteger(obj.size) || obj.size < 0) throw new InvalidInputError(`object ${obj.digest}: invalid size ${obj.size}`);
    await this.exclusive(async () => {
      if (obj.size <= this.settings.frameBytes) {
        const data = readSmall(obj, this.settings.verifyDigests);
        data.catch(() => undefined); // surfaced when drained; avoid an unhandled rejection meanwhile
        this.ahead.push({ obj, data });
        this.aheadBytes += obj.size;
        while (this.ahead.length > READ_AHEAD_FILES || this.aheadBytes > READ_AHEAD_BYTES) await this.drainOne();
      } else {
        while (this.ahead.length > 0) await this.drainOne();
        await (await this.target()).addStream(obj);
      }
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
        await this.pool.close();
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
    await this.pool.close();
  }

  private async exclusive(f: () => Promise<void>): Promise<void> {
    if (this.closed) throw new MinisandboxError('PACK_WRITER_CLOSED', 'the pack writer is finished or aborted', { hint: 'create a new PackWriter' });
    if (this.busy) throw new MinisandboxError('PACK_WRITER_BUSY', 'PackWriter.add called again before the previous call settled', { hint: 'await each add() before the next' });
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
    this.aheadBytes -= a.obj.size;
    const data = await a.data;
    await (await this.target()).addBuffer(a.obj, data);
  }

  /** The pack to add to, rolling over when the current one reached its target size. */
  private async target(): Promise<PackBuilder> {
    if (this.builder && this.builder.estimatedBytes() >= this.settings.targetPackBytes) {
      this.written.push(await this.builder.finish());
      this.builder = null;
    }
    this.builder ??= await PackBuilder.create(this.settings, this.pool);
    return this.builder;
  }
}

/** Reads a small file whole, checking it still has the size capture saw. */
async function readSmall(obj: PackSource, verify: boolean): Promise<Buffer> {
  const fh = await open(obj.path, 'r');
  try {
    // One byte more than expected reveals a file that grew.
    const buf = Buffer.allocUnsafe(obj.size + 1);
    let got = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, got, buf.length - got, got);
      if (bytesRead === 0) break;
      got += bytesRead;
      if (got === buf.length) break;
    }
    if (got !== obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found ${got === buf.length ? 'more' : got}`);
    const data = buf.subarray(0, obj.size);
    if (verify) checkDigest(obj, createHash('sha256').update(data));
    return data;
  } finally {
    await fh.close();
  }
}

function checkDigest(obj: PackSource, h: Hash): void {
  const actual = `sha256:${h.digest('hex')}`;
  if (actual !== obj.digest) throw new DigestMismatchError(`${obj.path} (changed since capture?)`, obj.digest, actual);
}

/** Resolves when a tar entry sink can take more, or is gone (the error then surfaces elsewhere). */
function drained(sink: ReturnType<Pack['entry']>): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      sink.off('drain', done);
      sink.off('close', done);
      resolve();
    };
    sink.on('drain', done);
    sink.on('close', done);
  });
}

/** Where the packer's output must be cut: a frame ends at tar offset `end`. */
interface Cut {
  end: number;
  /** The frame holds one large object and is compressed as a stream, never buffered. */
  streaming: boolean;
}

/** One pack file being written. */
class PackBuilder {
  private readonly tar: Pack = tarPack();
  private readonly hash = createHash('sha256');
  private readonly objects: PackObject[] = [];
  private readonly digests = new Set<Digest>();
  private readonly frames: PackFrame[] = [];
  private rawBytes = 0;
  // Producer side: tar offsets as entries are scheduled.
  private scheduled = 0;
  private frameStart = 0;
  private frameIndex = 0;
  private readonly cuts: Cut[] = [];
  // Consumer side.
  private packBytes = 0;
  private pendingRaw = 0;
  private readonly inflight: Promise<void>[] = [];
  private readonly consumed: Promise<number>;
  private failure: unknown = null;

  private constructor(
    private readonly s: Settings,
    private readonly pool: CompressPool,
    private readonly fh: FileHandle,
    private readonly tmpPath: string,
  ) {
    this.consumed = this.consume();
    this.consumed.catch((e: unknown) => {
      this.failure ??= e;
      this.tar.destroy();
    });
  }

  static async create(s: Settings, pool: CompressPool): Promise<PackBuilder> {
    const tmpPath = join(s.tempDir, `.pack-${process.pid}-${randomBytes(6).toString('hex')}.tmp`);
    const fh = await open(tmpPath, 'wx');
    return new PackBuilder(s, pool, fh, tmpPath);
  }

  /** Compressed bytes written plus a guess for what is still being compressed. */
  estimatedBytes(): number {
    return this.packBytes + Math.ceil(this.pendingRaw / 4);
  }

  async addBuffer(obj: PackSource, data: Buffer): Promise<void> {
    if (!this.schedule(obj)) return;
    await new Promise<void>((resolve, reject) => {
      this.tar.entry(this.header(obj), data, (err) => (err ? reject(this.failure ?? err) : resolve()));
    });
  }

  async addStream(obj: PackSource): Promise<void> {
    if (!this.schedule(obj)) return;
    let sink!: ReturnType<Pack['entry']>;
    const entryDone = new Promise<void>((resolve, reject) => {
      sink = this.tar.entry(this.header(obj), (err) => (err ? reject(this.failure ?? err) : resolve()));
    });
    entryDone.catch(() => undefined); // awaited below; a failure meanwhile surfaces through this.failure
    const fh = await open(obj.path, 'r');
    try {
      const h = this.s.verifyDigests ? createHash('sha256') : null;
      let got = 0;
      for (;;) {
        const buf = Buffer.allocUnsafe(Math.min(STREAM_CHUNK_BYTES, obj.size - got + 1));
        const { bytesRead } = await fh.read(buf, 0, buf.length, got);
        if (bytesRead === 0) break;
        got += bytesRead;
        if (got > obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found more`);
        const piece = buf.subarray(0, bytesRead);
        h?.update(piece);
        if (!sink.write(piece)) await drained(sink);
        if (this.failure) throw this.failure;
      }
      if (got !== obj.size) throw new SourceChangedError(obj.path.toString(), `expected ${obj.size} bytes, found ${got}`);
      if (h) checkDigest(obj, h);
    } catch (e) {
      sink.destroy(e instanceof Error ? e : new Error(String(e)));
      throw e;
    } finally {
      await fh.close();
    }
    sink.end(undefined);
    await entryDone;
  }

  async finish(): Promise<WrittenPack> {
    this.cuts.push({ end: this.scheduled + TAR_END_LENGTH, streaming: false });
    this.tar.finalize();
    const total = await this.consumed;
    await Promise.all(this.inflight);
    if (total !== this.scheduled + TAR_END_LENGTH) {
      throw new MinisandboxError('PACK_LAYOUT', `tar stream is ${total} bytes, expected ${this.scheduled + TAR_END_LENGTH}`, {
        hint: 'tar-stream wrote headers of an unexpected size; this is a bug in minisandbox',
      });
    }
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
    this.tar.destroy();
    await this.consumed.catch(() => undefined);
    await Promise.allSettled(this.inflight);
    await this.fh.close().catch(() => undefined);
    await rm(this.tmpPath, { force: true });
  }

  private header(obj: PackSource) {
    // Fixed metadata: packs of the same objects in the same order are byte-identical.
    return { name: `objects/${digestHex(obj.digest)}`, size: obj.size, mode: 0o644, mtime: new Date(0), uid: 0, gid: 0, type: 'file' as const };
  }

  /** Plans where frames end around this entry; false when the pack already holds the object. */
  private schedule(obj: PackSource): boolean {
    if (this.failure) throw this.failure;
    if (this.digests.has(obj.digest)) return false;
    this.digests.add(obj.digest);
    const len = tarEntryLength(obj.size);
    const open = this.scheduled - this.frameStart;
    const large = obj.size > this.s.frameBytes;
    if (open > 0 && (large || open + len > this.s.frameBytes)) this.cut(false);
    this.objects.push({ digest: obj.digest, size: obj.size, frame: this.frameIndex, offset: this.scheduled - this.frameStart + TAR_BLOCK });
    this.rawBytes += obj.size;
    this.scheduled += len;
    if (large) this.cut(true);
    return true;
  }

  private cut(streaming: boolean): void {
    this.cuts.push({ end: this.scheduled, streaming });
    this.frameStart = this.scheduled;
    this.frameIndex++;
  }

  /** Consumes the tar stream, cutting and compressing frames; resolves to the tar length. */
  private async consume(): Promise<number> {
    let offset = 0;
    let chunks: Buffer[] = [];
    let frameRaw = 0;
    let stream: StreamFrameCompressor | null = null;
    let streamStart = 0;
    for await (const data of this.tar as AsyncIterable<Buffer>) {
      let chunk = data;
      while (chunk.length > 0) {
        const cut = this.cuts[0];
        const take = cut && cut.end - offset < chunk.length ? cut.end - offset : chunk.length;
        const piece = chunk.subarray(0, take);
        chunk = chunk.subarray(take);
        offset += take;
        frameRaw += take;
        if (cut?.streaming) {
          if (!stream) {
            await Promise.all(this.inflight.splice(0)); // earlier frames first: the stream writes directly
            stream = new StreamFrameCompressor({ level: this.s.level, workers: LARGE_FRAME_WORKERS });
            streamStart = this.packBytes;
          }
          await this.append(stream.write(piece));
        } else {
          chunks.push(piece);
          this.pendingRaw += take;
        }
        if (cut && offset === cut.end) {
          this.cuts.shift();
          if (stream) {
            await this.append(stream.end());
            this.frames.push({ offset: streamStart, length: this.packBytes - streamStart, rawLength: frameRaw });
            stream = null;
          } else {
            await this.compressFrame(chunks, frameRaw);
          }
          chunks = [];
          frameRaw = 0;
        }
      }
    }
    if (this.cuts.length > 0 || chunks.length > 0) {
      throw this.failure ?? new MinisandboxError('PACK_LAYOUT', 'tar stream ended before the planned frame boundary', { hint: 'this is a bug in minisandbox' });
    }
    return offset;
  }

  /** Compresses one buffered frame on the pool; frames reach the file in order. */
  private async compressFrame(chunks: Buffer[], rawLength: number): Promise<void> {
    const compressed = this.pool.compress(Buffer.concat(chunks, rawLength));
    const previous = this.inflight[this.inflight.length - 1] ?? Promise.resolve();
    const written = (async () => {
      const out = await compressed;
      await previous;
      const start = this.packBytes;
      await this.append([out]);
      this.pendingRaw -= rawLength;
      this.frames.push({ offset: start, length: out.length, rawLength });
    })();
    written.catch(() => undefined);
    this.inflight.push(written);
    // Bounded memory: at most one frame per worker plus the one being filled.
    while (this.inflight.length > this.s.workers) await this.inflight.shift();
  }

  private async append(bufs: Buffer[]): Promise<void> {
    for (const b of bufs) {
      this.hash.update(b);
      let done = 0;
      while (done < b.length) {
        const { bytesWritten } = await this.fh.write(b, done, b.length - done);
        done += bytesWritten;
      }
      this.packBytes += b.length;
    }
  }
}
