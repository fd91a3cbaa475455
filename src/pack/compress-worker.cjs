/** The compression worker of compress-pool.ts (CommonJS, no loader needed: it runs the same from the sources, dist/lib and the bundle). */
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const b = require(workerData.binding);
const cctx = new b.CCtx();
cctx.setParameter(b.CParameter.compressionLevel, workerData.level);
// No zstd checksum: objects are verified by sha256 (see stream-compressor.ts).
// One output buffer for every frame; the result goes back in the input's own memory when it
// fits (always, unless the frame is incompressible), so no frame allocates anything here and
// the caller can fill that memory again.
let scratch = Buffer.alloc(0);
parentPort.on('message', ({ id, buffer, length }) => {
  try {
    const data = new Uint8Array(buffer, 0, length);
    const bound = b.compressBound(length);
    if (scratch.length < bound) scratch = Buffer.allocUnsafeSlow(bound);
    const n = cctx.compress2(scratch, data);
    const out = n <= buffer.byteLength ? buffer : new ArrayBuffer(n);
    scratch.copy(new Uint8Array(out), 0, 0, n);
    parentPort.postMessage({ id, out, length: n }, [out]);
  } catch (e) {
    parentPort.postMessage({ id, error: String(e?.message || e) });
  }
});
