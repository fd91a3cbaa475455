/**
 * One zstd frame compressed as a stream, for objects too large to buffer. Uses zstd's own worker
 * threads, so feeding input returns at once and the main thread keeps reading the file while
 * the frame compresses; only `end` waits for the workers.
 */
import binding from 'zstd-napi/binding.js';

const OUT_CHUNK = binding.cStreamOutSize();

export class StreamFrameCompressor {
  private readonly cctx = new binding.CCtx();

  constructor(opts: { level: number; workers: number; jobBytes?: number }) {
    this.cctx.setParameter(binding.CParameter.compressionLevel, opts.level);
    // No zstd checksum: every object's sha256 is verified while streaming, so a flipped byte is
    // reported as a DigestMismatchError naming the object rather than as an anonymous frame error.
    this.cctx.setParameter(binding.CParameter.checksumFlag, 0);
    if (opts.workers > 0) this.cctx.setParameter(binding.CParameter.nbWorkers, opts.workers);
    // zstd sizes its jobs from the window (8 MiB at level 3) and buffers several per worker
    if (opts.workers > 0 && opts.jobBytes !== undefined) this.cctx.setParameter(binding.CParameter.jobSize, opts.jobBytes);
  }

  /** Feeds `data`; returns whatever compressed output is ready (copies, safe to keep). */
  write(data: Uint8Array): Buffer[] {
    return this.run(data, binding.EndDirective.continue);
  }

  /** Ends the frame; returns the rest of its compressed bytes. */
  end(): Buffer[] {
    return this.run(new Uint8Array(0), binding.EndDirective.end);
  }

  private run(data: Uint8Array, op: binding.EndDirective): Buffer[] {
    const outs: Buffer[] = [];
    let src = data;
    for (;;) {
      const dst = Buffer.allocUnsafe(OUT_CHUNK);
      const [remaining, produced, consumed] = this.cctx.compressStream2(dst, src, op);
      if (produced > 0) outs.push(dst.subarray(0, produced));
      src = src.subarray(consumed);
      const flushed = op === binding.EndDirective.continue ? produced < dst.length : remaining === 0;
      if (src.length === 0 && flushed) return outs;
    }
  }
}
