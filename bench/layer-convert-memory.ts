/**
 * Peak RSS and time of converting one image layer of many entries (a generated tar stream of
 * empty files; BENCH_DIRS x BENCH_PER_DIR files; BENCH_CONTENT_EVERY=k gives every kth file
 * distinct content, 1 makes every file a distinct object). Run: npx tsx bench/layer-convert-memory.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { manyEntryTar } from '../test/helpers/many-entry-tar.js';
import { convertLayer } from '../src/image/layer-convert.js';
import { LocalRegistry } from '../src/registry/local.js';

const dirs = Number(process.env.BENCH_DIRS ?? 500);
const perDir = Number(process.env.BENCH_PER_DIR ?? 400);
const contentEvery = Number(process.env.BENCH_CONTENT_EVERY ?? 0);
const work = mkdtempSync(join(process.env.BENCH_TMP ?? tmpdir(), 'ms-bench-lc-'));
const reg = new LocalRegistry(join(work, 'reg'));
let peak = process.memoryUsage().rss;
const base = peak;
const t = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
const t0 = performance.now();
const r = await convertLayer(reg, manyEntryTar({ dirs, perDir, contentEvery }), { workDir: join(work, 'w'), catalog: new Map(), what: 'bench layer' });
const ms = performance.now() - t0;
clearInterval(t);
peak = Math.max(peak, process.memoryUsage().rss);
const held = (r as { maxEntriesHeld?: number }).maxEntriesHeld;
console.log(
  JSON.stringify({
    entries: r.layer.entries,
    layer: r.layer.digest,
    seconds: +(ms / 1000).toFixed(2),
    baseRssMiB: +(base / 2 ** 20).toFixed(0),
    peakRssMiB: +(peak / 2 ** 20).toFixed(0),
    maxEntriesHeld: held,
  }),
);
rmSync(work, { recursive: true, force: true });
