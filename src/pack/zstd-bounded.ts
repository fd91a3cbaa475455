/**
 * Streaming zstd decoding whose output may never exceed a stated bound: the defence against
 * decompression bombs in data a hostile registry serves.
 */
import binding from 'zstd-napi/binding.js';

/** Decoded piece size: large enough that most small objects arrive whole in one piece. */
const OUT_CHUNK = 1 << 20;

/**
 * Incremental decoder of exactly one zstd frame whose decoded length must equal `rawLength`.
 * `push` yields decoded pieces; `end` checks the frame was complete and nothing followed it.
 */
export class BoundedFrameDecoder {
  private readonly dctx = new binding.DCtx();
  private produced = 0;
  private frameDone = false;
  private readonly out = Buffer.allocUnsafe(OUT_CHUNK);

  constructor(
    private readonly rawLength: number,
    private readonly describe: () => string,
  ) {}

  /**
   * Decodes `input`, yielding decoded pieces. A piece is a view of a reused buffer: consume it
   * before advancing the iterator.
   */
  *decode(input: Uint8Array): Generator<Buffer, void, undefined> {
    let src = input;
    while (src.length > 0 || !this.frameDone) {
      if (this.frameDone) throw new Error(`${this.describe()}: ${src.length} bytes follow the end of the frame (stated compressed length too large)`);
      // One byte of room past the stated length, so a frame that decodes longer is caught.
      const room = Math.min(OUT_CHUNK, this.rawLength - this.produced + 1);
      const out = this.out.subarray(0, room);
      const [ret, produced, consumed] = this.dctx.decompressStream(out, src);
      src = src.subarray(consumed);
      if (produced > 0) {
        this.produced += produced;
        if (this.produced > this.rawLength) throw new Error(`${this.describe()}: decodes to more than the stated ${this.rawLength} bytes`);
        yield out.subarray(0, produced);
      }
      if (ret === 0) this.frameDone = true;
      else if (src.length === 0 && produced < out.length) return;
    }
  }

  end(): void {
    if (!this.frameDone) throw new Error(`${this.describe()}: compressed data ends mid-frame (truncated, or stated compressed length too small)`);
    if (this.produced !== this.rawLength) throw new Error(`${this.describe()}: decodes to ${this.produced} bytes, stated ${this.rawLength}`);
  }
}

/** Whole-buffer decoding (any number of frames) with an output cap. */
export function decompressBounded(input: Uint8Array, max: number): Buffer {
  const dctx = new binding.DCtx();
  const pieces: Buffer[] = [];
  let total = 0;
  let src = input;
  let ret = 0;
  while (src.length > 0) {
    const out = Buffer.allocUnsafe(OUT_CHUNK);
    const r = dctx.decompressStream(out, src);
    ret = r[0];
    src = src.subarray(r[2]);
    total += r[1];
    if (total > max) throw new Error(`decodes to more than ${max} bytes`);
    pieces.push(Buffer.from(out.subarray(0, r[1])));
    if (r[1] === 0 && r[2] === 0) throw new Error('decoder made no progress');
  }
  // Drain what the decoder still holds once the input is consumed.
  while (ret !== 0) {
    const out = Buffer.allocUnsafe(OUT_CHUNK);
    const r = dctx.decompressStream(out, src);
    ret = r[0];
    total += r[1];
    if (total > max) throw new Error(`decodes to more than ${max} bytes`);
    pieces.push(Buffer.from(out.subarray(0, r[1])));
    if (r[1] === 0) throw new Error('compressed data ends mid-frame');
  }
  return Buffer.concat(pieces);
}
