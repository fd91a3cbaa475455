/**
 * Hashing file contents off the main thread. For small files the per-file cost (open, read,
 * close, hash setup) dominates, so files go to worker threads in batches; each worker reads
 * with synchronous calls (no thread-pool round trip per syscall) through one reused buffer,
 * so memory stays at one buffer per worker whatever the file sizes.
 */
import type { Worker } from 'node:worker_threads';
import { MinisandboxError } from '../errors.js';
import { newWorker } from '../util/worker-file.js';
import { type HashResult, hashFileSync } from './hash-file.js';

export { type HashResult, hashFileSync } from './hash-file.js';

export type HashCallback = (err: Error | undefined, r: HashResult | undefined) => void;

const READ_BUF = 1 << 20;

/** A worker running capture-hash-worker.ts: hashFileSync, over batches of files. */
function startWorker(): Worker {
  return newWorker(import.meta.url, 'capture-hash-worker', { workerData: { readBuf: READ_BUF } });
}

interface WorkerReply {
  id: number;
  out: Array<{ hex: string; size: number } | { error: string; code?: string }>;
}

interface Pending {
  callbacks: HashCallback[];
  bytes: number;
  worker: number;
}

/** Workers started ahead of a capture, unreferenced (they keep no process alive) until a pool takes them. */
const parked: Worker[] = [];

/**
 * Starts up to `n` hashing workers now, for the next capture of this process to use from its
 * first file on: a builder calls it while the build commands run, so a capture neither hashes
 * on the main thread nor waits for threads to start (about 30 ms each here).
 */
export function prestartHashWorkers(n: number): void {
  while (parked.length < n) {
    const w = startWorker();
    w.unref();
    // one that dies while parked is simply not handed out
    const drop = (): void => {
      const i = parked.indexOf(w);
      if (i >= 0) parked.splice(i, 1);
    };
    w.once('error', drop);
    w.once('exit', drop);
    parked.push(w);
  }
}

/** How many started workers wait for a capture (for tests). */
export function parkedHashWorkers(): number {
  return parked.length;
}

function unpark(): Worker | undefined {
  const w = parked.pop();
  if (w === undefined) return undefined;
  w.removeAllListeners('error');
  w.removeAllListeners('exit');
  w.ref();
  return w;
}

/** Below this much work a tree is hashed inline: starting workers would cost more than it saves. */
const INLINE_FILES = 2048;
const INLINE_BYTES = 64 << 20;

/**
 * A pool of hashing workers fed in batches. It hashes on the calling thread until the tree
 * proves big (INLINE_FILES / INLINE_BYTES), then starts `workers` threads, so small trees
 * never pay the start-up. `workers: 0` always hashes on the calling thread (the baseline).
 */
export class HashPool {
  private readonly workers: Worker[] = [];
  private readonly load: number[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private batchPaths: Buffer[] = [];
  private batchSizes: number[] = [];
  private batchInos: bigint[] = [];
  private batchCbs: HashCallback[] = [];
  private batchBytes = 0;
  private readonly inlineBuf = Buffer.allocUnsafe(READ_BUF);
  private inlineFiles = 0;
  private inlineBytes = 0;
  private waiters: Array<() => void> = [];
  private failure: Error | undefined;

  constructor(
    private readonly maxWorkers: number,
    private readonly inlineUntilFiles = INLINE_FILES,
    private readonly batchFiles = 128,
    private readonly batchMaxBytes = 16 << 20,
  ) {}

  private startWorkers(): void {
    // workers started ahead (and already paid for) are enough: no more start-up on this path
    const n = parked.length > 0 ? Math.min(this.maxWorkers, parked.length) : this.maxWorkers;
    for (let i = 0; i < n; i++) {
      const w = unpark() ?? startWorker();
      w.on('message', (m: WorkerReply) => this.onReply(m));
      w.on('error', (e) => this.fail(e));
      this.workers.push(w);
      this.load.push(0);
    }
  }

  /** Queues one file (`path` an entry of a held directory, still inode `ino`); `cb` runs once its digest is known (or reading it failed). */
  submit(path: Buffer, size: number, ino: bigint, cb: HashCallback): void {
    if (
      this.workers.length === 0 &&
      this.maxWorkers > 0 &&
      (parked.length > 0 || this.inlineFiles >= this.inlineUntilFiles || this.inlineBytes >= INLINE_BYTES)
    )
      this.startWorkers();
    if (this.workers.length === 0) {
      this.inlineFiles++;
      this.inlineBytes += size;
      let r: HashResult | undefined;
      let err: Error | undefined;
      try {
        r = hashFileSync(path, size, this.inlineBuf, ino);
      } catch (e) {
        err = e as Error;
      }
      cb(err, r);
      return;
    }
    this.batchPaths.push(path);
    this.batchSizes.push(size);
    this.batchInos.push(ino);
    this.batchCbs.push(cb);
    this.batchBytes += size;
    if (this.batchPaths.length >= this.batchFiles || this.batchBytes >= this.batchMaxBytes) this.flush();
  }

  /** Sends the partial batch, so that a caller about to wait is not waiting on itself. */
  flush(): void {
    if (this.batchPaths.length === 0) return;
    let w = 0;
    for (let i = 1; i < this.load.length; i++) if (this.load[i]! < this.load[w]!) w = i;
    const id = this.nextId++;
    const bytes = this.batchBytes + this.batchPaths.length * 4096; // per-file cost counts too
    this.pending.set(id, { callbacks: this.batchCbs, bytes, worker: w });
    this.load[w]! += bytes;
    this.workers[w]!.postMessage({ id, paths: this.batchPaths, sizes: this.batchSizes, inos: this.batchInos });
    this.batchPaths = [];
    this.batchSizes = [];
    this.batchInos = [];
    this.batchCbs = [];
    this.batchBytes = 0;
  }

  /** Resolves when at least one more batch has finished (or the pool failed). */
  progress(): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }

  private onReply(m: WorkerReply): void {
    const p = this.pending.get(m.id);
    if (p === undefined) return;
    this.pending.delete(m.id);
    this.load[p.worker]! -= p.bytes;
    m.out.forEach((r, i) => {
      const cb = p.callbacks[i]!;
      if ('error' in r) {
        const e = new Error(r.error) as NodeJS.ErrnoException;
        if (r.code !== undefined) e.code = r.code;
        cb(e, undefined);
      } else cb(undefined, r);
    });
    this.wake();
  }

  private fail(e: Error): void {
    this.failure = new MinisandboxError('CAPTURE_HASH', `hashing worker failed: ${e.message}`, {
      cause: e,
      hint: 'retry the capture; if it persists, run with hashWorkers: 0',
    });
    this.wake();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}
