/** The hashing worker of capture-hash.ts: keep it in step with hashFileSync there (CommonJS, no loader needed: it runs the same from the sources, dist/lib and the bundle). */
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const { createHash, hash } = require('node:crypto');
const oneShot = (data) => (typeof hash === 'function' ? hash('sha256', data, 'hex') : createHash('sha256').update(data).digest('hex'));
const { openSync, readSync, closeSync } = require('node:fs');
const buf = Buffer.allocUnsafe(workerData.readBuf);
parentPort.on('message', (batch) => {
  const out = [];
  for (let i = 0; i < batch.paths.length; i++) {
    const path = batch.paths[i];
    const expected = batch.sizes[i];
    let fd;
    try {
      fd = openSync(path, 'r');
      const first = readSync(fd, buf, 0, buf.length, null);
      if (first < buf.length && first >= expected) {
        out.push({ hex: oneShot(buf.subarray(0, first)), size: first });
        continue;
      }
      const h = createHash('sha256');
      h.update(buf.subarray(0, first));
      let size = first;
      while (first > 0) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) break;
        h.update(buf.subarray(0, n));
        size += n;
        if (n < buf.length && size >= expected) break;
      }
      out.push({ hex: h.digest('hex'), size });
    } catch (e) {
      out.push({ error: String((e && e.message) || e), code: e && e.code });
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  }
  parentPort.postMessage({ id: batch.id, out });
});
