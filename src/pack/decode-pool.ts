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
import { workerFile } from '../util/worker-file.js';

// The worker is decode-worker.cjs (CommonJS: it needs no loader; see util/worker-file.ts).
// Frames travel in shared memory slots, each sent once and named by number afterwards (see
// DecodePool), so no message moves or copies a buffer.

/** Frames decoding to more than this stay on the streaming decoder (bounded memory). */
export const MAX_POOLED_FRAME_BYTES = 32 << 20;

interface Reply {
  id: number;
  digests?: string[];
  error?: string;
}

/** A decoded frame and the sha256 (hex) of each span asked for, in order. */
export interface DecodedFrame {
  data: Buffer;
  digests: string[];
  /**
   * Keeps the frame's memory from serving another frame until the function returned is called
   * (once), beyond `release`: a consumer may then keep views of it instead of copies.
   */
  retain: () => () => void;
}

/** Slot sizes: most frames are at most 4 MiB (FRAME_TARGET_BYTES) decoded, less compressed. */
const MIN_SLOT_BYTES = (4 << 20) + 4096;
/** Slots beyond this many are dropped once free: frames decoded ahead plus those held for a lay-out. */
const KEPT_SLOTS = 32;

/**
 * Memory shared with the worker: a slot is sent to it once and named by number afterwards.
 * Buffers moved (transferred) with each message counted as fresh external memory on every
 * arrival, which set off a full garbage collection every few frames (measured: 56 in a
 * 1.2 GiB pull); fresh memory per frame also cost page faults.
 */
class Slots {
  /** `refs`: holders of the slot (0: free). */
  private readonly all: Array<{ sab: SharedArrayBuffer; refs: number; sent: boolean }> = [];

  /** A free slot of at least `size` bytes: its number, memory, and whether the worker knows it. */
  take(size: number): { n: number; sab: SharedArrayBuffer; fresh: boolean } {
    let n = this.all.findIndex((s) => s.refs === 0 && s.sab.byteLength >= size);
    if (n < 0) {
      n = this.all.findIndex((s) => s.sab.byteLength === 0);
      const slot = { sab: new SharedArrayBuffer(Math.max(size, MIN_SLOT_BYTES)), refs: 0, sent: false };
      if (n < 0) n = this.all.push(slot) - 1;
      else this.all[n] = slot;
    }
    const s = this.all[n]!;
    s.refs = 1;
    const fresh = !s.sent;
    s.sent = true;
    return { n, sab: s.sab, fresh };
  }

  retain(n: number): void {
    this.all[n]!.refs++;
  }

  memory(n: number): SharedArrayBuffer {
    return this.all[n]!.sab;
  }

  /** The slot holding `buffer`, if any. */
  find(buffer: ArrayBufferLike): number {
    return this.all.findIndex((s) => s.sab === buffer);
  }

  give(n: number): void {
    const s = this.all[n]!;
    if (--s.refs > 0) return;
    // beyond the kept number, a freed slot's memory goes (its number is reused, sent again)
    if (n >= KEPT_SLOTS) this.all[n] = { sab: new SharedArrayBuffer(0), refs: 0, sent: false };
  }
}

export class DecodePool {
  private readonly worker: Worker;
  private readonly pending = new Map<
    number,
    { input: number; output: number; length: number; resolve: (d: DecodedFrame) => void; reject: (e: Error) => void }
  >();
  private nextId = 0;
  private failure: Error | null = null;
  private readonly inputs = new Slots();
  private readonly outputs = new Slots();

  constructor() {
    const binding = createRequire(import.meta.url).resolve('zstd-napi/binding.js');
    this.worker = new Worker(workerFile(import.meta.url, 'decode-worker.cjs'), { workerData: { binding } });
    this.worker.on('message', (m: Reply) => this.onReply(m));
    this.worker.on('error', (e) => this.fail(e));
  }

  /**
   * The decoded bytes of one complete zstd frame that must decode to exactly `rawLength` bytes,
   * and the digests of `spans` ([offset, size] inside it). `frame` is copied at once. Give the
   * data back with `release` once nothing refers to it any more.
   */
  decode(frame: Uint8Array, rawLength: number, spans: Array<[number, number]> = []): Promise<DecodedFrame> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    const input = this.inputs.take(frame.length);
    new Uint8Array(input.sab, 0, frame.length).set(frame);
    const output = this.outputs.take(rawLength + 1);
    return new Promise<DecodedFrame>((resolve, reject) => {
      this.pending.set(id, { input: input.n, output: output.n, length: rawLength, resolve, reject });
      this.worker.postMessage({
        id,
        input: input.n,
        length: frame.length,
        output: output.n,
        rawLength,
        spans,
        ...(input.fresh ? { inputSab: input.sab } : {}),
        ...(output.fresh ? { outputSab: output.sab } : {}),
      });
    });
  }

  /** Takes back the memory of a decoded frame for later frames (its data must not be used after). */
  release(data: Buffer): void {
    const n = this.outputs.find(data.buffer);
    if (n >= 0) this.outputs.give(n);
  }

  async close(): Promise<void> {
    await this.worker.terminate();
    this.fail(new Error('the frame decoder was closed'));
  }

  private onReply(m: Reply): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    this.inputs.give(p.input);
    if (m.error !== undefined || m.digests === undefined) {
      this.outputs.give(p.output);
      p.reject(new Error(m.error ?? 'no output'));
    } else p.resolve({ data: Buffer.from(this.outputs.memory(p.output), 0, p.length), digests: m.digests, retain: () => this.pin(p.output) });
  }

  private pin(n: number): () => void {
    this.outputs.retain(n);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.outputs.give(n);
    };
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }
}
