/**
 * A pack writer's compression resources, shared by every pack it writes, so that none is made
 * per frame or per object:
 *
 * - frame buffers: a frame moves to a compression worker, comes back holding its compressed
 *   bytes (compress-pool.ts), is appended to the pack and is then filled again. Allocated per
 *   frame, 4 MiB buffers were freed only when a garbage collector (the main thread's or a
 *   worker's) got to them, and the churn left malloc's arenas fragmented: together about
 *   70 MiB of RSS while importing a tree of small files.
 * - the streaming context for large objects: it runs zstd's worker threads with their job
 *   buffers (32 MiB); made per object, each stayed allocated until the garbage collector
 *   finalized it, and four large files in a row held four of them.
 */
import { CompressPool } from './compress-pool.js';
import { TAR_END_LENGTH, tarEntryLength } from './pack-index.js';
import { LARGE_FRAME_JOB_BYTES, LARGE_FRAME_WORKERS } from './settings.js';
import { StreamFrameCompressor } from './stream-compressor.js';

export class Compressors {
  private started: CompressPool | null = null;
  /** Capacity of a pooled frame buffer: the largest entry a frame of `frameBytes` takes, plus the end marker and the byte that detects growth. */
  readonly frameCapacity: number;
  private readonly free: ArrayBuffer[] = [];
  private stream: StreamFrameCompressor | null = null;

  constructor(
    private readonly workers: number,
    private readonly level: number,
    frameBytes: number,
  ) {
    this.frameCapacity = tarEntryLength(frameBytes) + 2 * TAR_END_LENGTH;
  }

  /** The compression workers, started on first use: a push with nothing (or one small frame) new needs none. */
  get pool(): CompressPool {
    this.started ??= new CompressPool({ workers: this.workers, level: this.level });
    return this.started;
  }

  get poolStarted(): boolean {
    return this.started !== null;
  }

  /** A frame buffer of at least `bytes`, reused when one is free. It owns its whole memory (so it can move to a worker). */
  takeFrame(bytes: number): Buffer {
    if (bytes > this.frameCapacity) return Buffer.allocUnsafeSlow(bytes);
    const ab = this.free.pop();
    return ab === undefined ? Buffer.allocUnsafeSlow(this.frameCapacity) : Buffer.from(ab);
  }

  /**
   * Returns the memory behind `b` (a frame, or compressed bytes the pool handed back in a
   * frame's memory) for reuse; `b` must not be used afterwards. Other buffers are left to the
   * garbage collector.
   */
  giveBack(b: Buffer): void {
    const ab = b.buffer;
    // every frame in flight can come back at once: one per worker, one queued, one filling
    if (ab instanceof ArrayBuffer && ab.byteLength === this.frameCapacity && this.free.length < this.workers + 2) this.free.push(ab);
  }

  /** The context for large objects' frames; after `end()` it starts a new frame on the next write. */
  streaming(): StreamFrameCompressor {
    this.stream ??= new StreamFrameCompressor({ level: this.level, workers: LARGE_FRAME_WORKERS, jobBytes: LARGE_FRAME_JOB_BYTES });
    return this.stream;
  }

  /** Drops the streaming context: one left mid-frame by a failure must not start the next frame. */
  discardStreaming(): void {
    this.stream = null;
  }

  async close(): Promise<void> {
    this.stream = null;
    this.free.length = 0;
    await this.started?.close();
  }
}
