/**
 * One zstd frame compressed as a stream, for objects too large to buffer. Uses zstd's own worker
 * threads, so feeding input returns at once and the main thread keeps reading the file while
 * the frame compresses; only `end` waits for the workers. After `end` the same context
 * compresses the next frame: its threads and buffers are made once.
 */
import binding from 'zstd-napi/binding.js';

const OUT_CHUNK = binding.cStreamOutSize();

/** Takes a piece of compressed output; the piece is only valid until the returned promise settles. */
export type CompressedSink = (piece: Buffer) => Promise<void>;

export class StreamFrameCompressor {
  private readonly cctx = new binding.CCtx();
  /**
   * Every piece of output lands here and is consumed before the next is produced: a buffer per
   * piece (~128 KiB each, thousands per large file) piled up as garbage, ~40 MiB of it.
   */
  private readonly out = Buffer.allocUnsafeSlow(OUT_CHUNK);

  constructor(opts: { level: number; workers: number; jobBytes?: number }) {
    this.cctx.setParameter(binding.CParameter.compressionLevel, opts.level);
    // No zstd checksum: every object's sha256 is verified while streaming, so a flipped byte is
    // reported as a DigestMismatchError naming the object rather than as an anonymous frame error.
    this.cctx.setParameter(binding.CParameter.checksumFlag, 0);
    if (opts.workers > 0) this.cctx.setParameter(binding.CParameter.nbWorkers, opts.workers);
    // zstd sizes its jobs from the window (8 MiB at level 3) and buffers several per worker
    if (opts.workers > 0 && opts.jobBytes !== undefined) this.cctx.setParameter(binding.CParameter.jobSize, opts.jobBytes);
  }

  /** Feeds `data` (free to reuse once this settles), passing whatever output is ready to `sink`. */
  write(data: Uint8Array, sink: CompressedSink): Promise<void> {
    return this.run(data, binding.EndDirective.continue, sink);
  }

  /** Ends the frame, passing the rest of its compressed bytes to `sink`. */
  end(sink: CompressedSink): Promise<void> {
    return this.run(new Uint8Array(0), binding.EndDirective.end, sink);
  }

  private async run(data: Uint8Array, op: binding.EndDirective, sink: CompressedSink): Promise<void> {
    let src = data;
    for (;;) {
      const [remaining, produced, consumed] = this.cctx.compressStream2(this.out, src, op);
      src = src.subarray(consumed);
      if (produced > 0) await sink(this.out.subarray(0, produced));
      const flushed = op === binding.EndDirective.continue ? produced < this.out.length : remaining === 0;
      if (src.length === 0 && flushed) return;
    }
  }
}
