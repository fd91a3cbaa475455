/**
 * Frame compression off the main thread. zstd-napi compresses synchronously, so the frames of
 * small objects go to worker threads while the main thread keeps reading, tarring and writing;
 * on two cores this roughly doubles packing throughput with the full compression ratio (zstd's
 * own multithreading would split each 4 MiB frame into jobs and block at every frame end).
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { MinisandboxError } from '../errors.js';
import { workerFile } from '../util/worker-file.js';

// The worker is compress-worker.cjs (CommonJS: it needs no loader; see util/worker-file.ts).

interface Reply {
  id: number;
  out?: ArrayBuffer;
  length?: number;
  error?: string;
}

interface Pending {
  resolve: (b: Buffer) => void;
  reject: (e: Error) => void;
}

/** A copy that owns its ArrayBuffer: transferring a pooled Buffer would detach Node's shared pool. */
function copyUnpooled(data: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(data.length);
  data.copy(copy);
  return copy;
}

export class CompressPool {
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private failure: Error | null = null;

  constructor(opts: { workers: number; level: number }) {
    const bindingPath = createRequire(import.meta.url).resolve('zstd-napi/binding.js');
    for (let i = 0; i < opts.workers; i++) {
      const w = new Worker(workerFile(import.meta.url, 'compress-worker.cjs'), { workerData: { binding: bindingPath, level: opts.level } });
      w.on('message', (m: Reply) => this.onReply(m));
      w.on('error', (e) => this.fail(e));
      this.workers.push(w);
    }
  }

  /**
   * Compresses the first `length` bytes of `data` into one complete zstd frame. With `owned`
   * (data from Buffer.allocUnsafeSlow, whole) its memory moves to the worker and `data` must not
   * be used afterwards; otherwise the bytes are copied. The result is usually a view at the
   * start of that same memory (its `.buffer`), which the caller may then reuse.
   */
  compress(data: Buffer, length: number = data.length, owned = false): Promise<Buffer> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    const w = this.workers[id % this.workers.length]!;
    // Only a buffer that owns its whole ArrayBuffer can be moved without copying others' bytes.
    // A pooled Buffer shares its ArrayBuffer with unrelated Buffers: moving it would detach them.
    const owns = owned && data.byteOffset === 0 && data.buffer instanceof ArrayBuffer;
    const payload = owns ? data : copyUnpooled(data.subarray(0, length));
    const buffer = payload.buffer as ArrayBuffer;
    return new Promise<Buffer>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      w.postMessage({ id, buffer, length }, [buffer]);
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
    this.workers.length = 0;
    this.fail(new MinisandboxError('PACK_WRITER_CLOSED', 'the pack compressor was closed'));
  }

  private onReply(m: Reply): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.error !== undefined || m.out === undefined || m.length === undefined) {
      p.reject(new MinisandboxError('COMPRESS_FAILED', `zstd compression failed: ${m.error ?? 'no output'}`));
    } else {
      p.resolve(Buffer.from(m.out, 0, m.length));
    }
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }
}
