/**
 * Frame decompression off the main thread, for pulls: zstd-napi decodes synchronously, and on
 * the main thread it was the largest single cost of fetching small objects (measured), while
 * that thread also hashes, writes and parses the manifest for the lay-out running alongside.
 * A worker decodes one whole frame at a time, with the same bounds as BoundedFrameDecoder:
 * output never past the stated length, exactly one complete frame, nothing after it.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

// Eval'd CommonJS so the worker needs no separate file (and works under tsx, vitest and tsc output alike).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const b = require(workerData.binding);
function decode(input, rawLength) {
  const dctx = new b.DCtx();
  // one byte of room past the stated length, so a frame that decodes longer is caught
  const out = Buffer.allocUnsafeSlow(rawLength + 1);
  let src = input;
  let produced = 0;
  for (;;) {
    const [ret, p, c] = dctx.decompressStream(out.subarray(produced), src);
    produced += p;
    src = src.subarray(c);
    if (produced > rawLength) throw new Error('decodes to more than the stated ' + rawLength + ' bytes');
    if (ret === 0) break;
    if (src.length === 0 && p === 0) throw new Error('compressed data ends mid-frame (truncated, or stated compressed length too small)');
  }
  if (src.length > 0) throw new Error(src.length + ' bytes follow the end of the frame (stated compressed length too large)');
  if (produced !== rawLength) throw new Error('decodes to ' + produced + ' bytes, stated ' + rawLength);
  return out;
}
parentPort.on('message', ({ id, buffer, length, rawLength }) => {
  try {
    const out = decode(new Uint8Array(buffer, 0, length), rawLength);
    parentPort.postMessage({ id, out: out.buffer, length: rawLength }, [out.buffer]);
  } catch (e) {
    parentPort.postMessage({ id, error: String((e && e.message) || e) });
  }
});
`;

/** Frames decoding to more than this stay on the streaming decoder (bounded memory). */
export const MAX_POOLED_FRAME_BYTES = 32 << 20;

interface Reply {
  id: number;
  out?: ArrayBuffer;
  length?: number;
  error?: string;
}

export class DecodePool {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (b: Buffer) => void; reject: (e: Error) => void }>();
  private nextId = 0;
  private failure: Error | null = null;

  constructor() {
    const binding = createRequire(import.meta.url).resolve('zstd-napi/binding.js');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { binding } });
    this.worker.on('message', (m: Reply) => this.onReply(m));
    this.worker.on('error', (e) => this.fail(e));
  }

  /** The decoded bytes of one complete zstd frame that must decode to exactly `rawLength` bytes. */
  decode(frame: Uint8Array, rawLength: number): Promise<Buffer> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    // a copy that owns its memory, so it can move to the worker without detaching anything else
    const own = Buffer.allocUnsafeSlow(frame.length);
    own.set(frame);
    const buffer = own.buffer as ArrayBuffer;
    return new Promise<Buffer>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, buffer, length: frame.length, rawLength }, [buffer]);
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
    this.fail(new Error('the frame decoder was closed'));
  }

  private onReply(m: Reply): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.error !== undefined || m.out === undefined || m.length === undefined) p.reject(new Error(m.error ?? 'no output'));
    else p.resolve(Buffer.from(m.out, 0, m.length));
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }
}
