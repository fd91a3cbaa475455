/**
 * The hashing worker of capture-hash.ts: hashFileSync over each batch of files it is sent, one
 * read buffer for all. A worker thread runs JavaScript files only: the build bundles this into
 * capture-hash-worker.cjs (bin/build-workers.mjs), and from the sources util/worker-file.ts does.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { hashFileSync } from './hash-file.js';

interface Batch {
  id: number;
  /** Buffers on the sending side, Uint8Arrays once cloned here: both name a file. */
  paths: Uint8Array[];
  sizes: number[];
  /** The inode each path must still be (see hashFileSync). */
  inos: bigint[];
}

const port = parentPort;
if (port === null) throw new Error('capture-hash-worker runs as a worker thread');
const buf = Buffer.allocUnsafe((workerData as { readBuf: number }).readBuf);
port.on('message', (batch: Batch) => {
  const out = batch.paths.map((path, i) => {
    try {
      return hashFileSync(Buffer.from(path.buffer, path.byteOffset, path.byteLength), batch.sizes[i] ?? 0, buf, batch.inos[i]);
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      return { error: String(err?.message || e), code: err?.code };
    }
  });
  port.postMessage({ id: batch.id, out });
});
