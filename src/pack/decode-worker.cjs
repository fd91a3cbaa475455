/** The decoding worker of decode-pool.ts (CommonJS, no loader needed: it runs the same from the sources, dist/lib and the bundle). */
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');
const b = require(workerData.binding);
const sha256 = typeof crypto.hash === 'function' ? (d) => crypto.hash('sha256', d, 'hex') : (d) => crypto.createHash('sha256').update(d).digest('hex');
const inputs = new Map();
const outputs = new Map();
const dctx = new b.DCtx();
function decode(input, rawLength, outSlot) {
  // one byte of room past the stated length, so a frame that decodes longer is caught
  const out = Buffer.from(outSlot, 0, rawLength + 1);
  // one context for every frame: a frame that failed half-way must not leave state behind
  dctx.reset(b.ResetDirective.sessionOnly);
  let src = input;
  let produced = 0;
  for (;;) {
    const [ret, p, c] = dctx.decompressStream(out.subarray(produced), src);
    produced += p;
    src = src.subarray(c);
    if (produced > rawLength) throw new Error(`decodes to more than the stated ${rawLength} bytes`);
    if (ret === 0) break;
    if (src.length === 0 && p === 0) throw new Error('compressed data ends mid-frame (truncated, or stated compressed length too small)');
  }
  if (src.length > 0) throw new Error(`${src.length} bytes follow the end of the frame (stated compressed length too large)`);
  if (produced !== rawLength) throw new Error(`decodes to ${produced} bytes, stated ${rawLength}`);
  return out;
}
parentPort.on('message', ({ id, input, inputSab, length, output, outputSab, rawLength, spans }) => {
  if (inputSab !== undefined) inputs.set(input, inputSab);
  if (outputSab !== undefined) outputs.set(output, outputSab);
  try {
    const out = decode(new Uint8Array(inputs.get(input), 0, length), rawLength, outputs.get(output));
    // the digests of the objects the caller wants, so that its thread only compares them
    const digests = spans.map(([offset, size]) => sha256(out.subarray(offset, offset + size)));
    parentPort.postMessage({ id, digests });
  } catch (e) {
    parentPort.postMessage({ id, error: String(e?.message || e) });
  }
});
