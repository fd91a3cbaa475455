/**
 * Frame decompression off the main thread, for pulls: zstd-napi decodes synchronously, and on
 * the main thread it was the largest single cost of fetching small objects (measured), while
 * that thread also hashes, writes and parses the manifest for the lay-out running alongside.
 * A worker decodes one whole frame at a time, with the same bounds as BoundedFrameDecoder:
 * output never past the stated length, exactly one complete frame, nothing after it; it also
 * hashes the objects wanted from the frame, so the main thread only compares digests.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

// Eval'd CommonJS so the worker needs no separate file (and works under tsx, vitest and tsc output alike).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');
const b = require(workerData.binding);
const sha256 = typeof crypto.hash === 'function' ? (d) => crypto.hash('sha256', d, 'hex') : (d) => crypto.createHash('sha256').update(d).digest('hex');
function decode(input, rawLength, spare) {
  const dctx = new b.DCtx();
  // one byte of room past the stated length, so a frame that decodes longer is caught
  // room for a little more than a typical frame, so that the buffer can serve the next ones
  const out = Buffer.from(spare !== undefined && spare.byteLength >= rawLength + 1 ? spare : new ArrayBuffer(Math.max(rawLength + 1, 5 << 20)), 0, rawLength + 1);
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
parentPort.on('message', ({ id, buffer, length, rawLength, spans, spare }) => {
  try {
    const out = decode(new Uint8Array(buffer, 0, length), rawLength, spare);
    // the digests of the objects the caller wants, so that its thread only compares them
    const digests = spans.map(([offset, size]) => sha256(out.subarray(offset, offset + size)));
    parentPort.postMessage({ id, out: out.buffer, length: rawLength, digests, input: buffer }, [out.buffer, buffer]);
  } catch (e) {
    parentPort.postMessage({ id, error: String((e && e.message) || e), input: buffer }, [buffer]);
  }
});
`;

/** Frames decoding to more than this stay on the streaming decoder (bounded memory). */
export const MAX_POOLED_FRAME_BYTES = 32 << 20;

interface Reply {
  id: number;
  out?: ArrayBuffer;
  length?: number;
  digests?: string[];
  error?: string;
  input: ArrayBuffer;
}

/** A decoded frame and the sha256 (hex) of each span asked for, in order. */
export interface DecodedFrame {
  data: Buffer;
  digests: string[];
}

/** Spare buffers kept for reuse, each way: enough for the frames in flight. */
const SPARES = 8;

export class DecodePool {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (d: DecodedFrame) => void; reject: (e: Error) => void }>();
  private nextId = 0;
  private failure: Error | null = null;
  // Buffers travel to the worker and back instead of being allocated per frame: fresh memory
  // for every 4 MiB frame cost page faults and garbage collections (measured).
  private readonly spareInputs: ArrayBuffer[] = [];
  private readonly spareOutputs: ArrayBuffer[] = [];

  constructor() {
    const binding = createRequire(import.meta.url).resolve('zstd-napi/binding.js');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { binding } });
    this.worker.on('message', (m: Reply) => this.onReply(m));
    this.worker.on('error', (e) => this.fail(e));
  }

  /**
   * The decoded bytes of one complete zstd frame that must decode to exactly `rawLength` bytes,
   * and the digests of `spans` ([offset, size] inside it). Give the data back with `release`
   * once nothing refers to it any more.
   */
  decode(frame: Uint8Array, rawLength: number, spans: Array<[number, number]> = []): Promise<DecodedFrame> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    // a copy that owns its memory, so it can move to the worker without detaching anything else
    const reuse = this.takeSpare(this.spareInputs, frame.length);
    const buffer = reuse ?? new ArrayBuffer(Math.max(frame.length, 1 << 20));
    new Uint8Array(buffer, 0, frame.length).set(frame);
    const spare = this.takeSpare(this.spareOutputs, rawLength + 1);
    const transfer = spare === undefined ? [buffer] : [buffer, spare];
    return new Promise<DecodedFrame>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, buffer, length: frame.length, rawLength, spans, spare }, transfer);
    });
  }

  /** Takes back the memory of a decoded frame for later frames (its data must not be used after). */
  release(data: Buffer): void {
    if (this.spareOutputs.length < SPARES && data.byteOffset === 0) this.spareOutputs.push(data.buffer as ArrayBuffer);
  }

  async close(): Promise<void> {
    await this.worker.terminate();
    this.fail(new Error('the frame decoder was closed'));
  }

  private takeSpare(list: ArrayBuffer[], size: number): ArrayBuffer | undefined {
    const i = list.findIndex((b) => b.byteLength >= size);
    return i < 0 ? undefined : list.splice(i, 1)[0];
  }

  private onReply(m: Reply): void {
    if (this.spareInputs.length < SPARES) this.spareInputs.push(m.input);
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.error !== undefined || m.out === undefined || m.length === undefined || m.digests === undefined) p.reject(new Error(m.error ?? 'no output'));
    else p.resolve({ data: Buffer.from(m.out, 0, m.length), digests: m.digests });
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }
}
