/**
 * Capture throughput against the baselines a user would otherwise reach for, in one run:
 *   capture (walk + hash + manifest)    vs  tar -cf - DIR | zstd -3 -T0 > /dev/null
 *                                        vs  tar -cf - DIR > /dev/null   (tar's own walk + read)
 *                                        vs  tar -cf /dev/null DIR       (GNU tar skips reading file data here)
 * on a generated tree with a realistic size mix (most files small, a few large, ~10% duplicate
 * contents). Page cache warm for every contestant; medians over repeats, runs interleaved.
 *
 *   npx tsx bench/capture.ts
 *   BENCH_FILES=50000 BENCH_BYTES=1000000000 BENCH_REPEATS=3 BENCH_DIR=/tmp/x BENCH_WORKERS=2 npx tsx bench/capture.ts
 *   BENCH_TREE=node_modules npx tsx bench/capture.ts
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { captureLayer } from '../src/layer/capture.js';
import { rng } from '../test/helpers/rng.js';

const FILES = Number(process.env.BENCH_FILES ?? 50_000);
const BYTES = Number(process.env.BENCH_BYTES ?? 1_000_000_000);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** BENCH_TREE: measure an existing tree (e.g. a node_modules) instead of generating one. */
const TREE = process.env.BENCH_TREE;
const DIR = TREE ?? process.env.BENCH_DIR ?? join(tmpdir(), `ms-bench-capture-${FILES}-${BYTES}`);
const WORKERS = process.env.BENCH_WORKERS === undefined ? undefined : Number(process.env.BENCH_WORKERS);

function generate(dir: string): void {
  const marker = `${dir}.generated`;
  if (existsSync(marker)) return;
  rmSync(dir, { recursive: true, force: true });
  const r = rng(42);
  // a text-like corpus (compresses ~3x with zstd -3, like source code and packages)
  const words = Array.from({ length: 4000 }, () =>
    Array.from({ length: 2 + Math.floor(r() * 9) }, () => String.fromCharCode(97 + Math.floor(r() * 26))).join(''),
  );
  const parts: string[] = [];
  let len = 0;
  while (len < 8 << 20) {
    const w = words[Math.floor(r() * words.length)]! + (r() < 0.1 ? '\n' : ' ');
    parts.push(w);
    len += w.length;
  }
  const corpus = Buffer.from(parts.join(''));
  // sizes: 70% small (<4 KiB), 25% medium (<64 KiB), 5% large; then scaled to the byte budget
  const raw = Array.from({ length: FILES }, () => {
    const u = r();
    if (u < 0.7) return 1 + Math.floor(r() * 4096);
    if (u < 0.95) return 4096 + Math.floor(r() * 60_000);
    return 65_536 + Math.floor(r() * r() * 8_000_000);
  });
  const total = raw.reduce((a, b) => a + b, 0);
  const scale = BYTES / total;
  mkdirSync(dir, { recursive: true });
  let made = 0;
  for (let i = 0; i < FILES; i++) {
    const d = join(dir, `pkg${i % 97}`, `mod${i % 13}`, `lib${i % 5}`);
    if (i < 97 * 13 * 5) mkdirSync(d, { recursive: true });
    const size = Math.max(0, Math.round(raw[i]! * scale));
    const dup = i > 100 && r() < 0.1; // same bytes as an earlier file: dedup counts it once
    const seed = dup ? Math.floor(r() * i) : i;
    const off = Math.floor(rng(seed + 7)() * (corpus.length - 1));
    const buf = Buffer.alloc(size);
    // a unique prefix makes every non-duplicate content distinct
    const head = Buffer.from(`// file ${seed}\n`);
    head.copy(buf, 0, 0, Math.min(head.length, size));
    for (let p = head.length; p < size; ) {
      const start = (off + p) % corpus.length;
      const n = Math.min(size - p, corpus.length - start);
      corpus.copy(buf, p, start, start + n);
      p += n;
    }
    writeFileSync(join(d, `f${i}.txt`), buf);
    made += size;
  }
  writeFileSync(marker, `${FILES} files, ${made} bytes\n`);
  process.stderr.write(`generated ${FILES} files, ${(made / 1e6).toFixed(0)} MB in ${dir}\n`);
}

function sh(cmd: string): void {
  execFileSync('bash', ['-euo', 'pipefail', '-c', cmd], { stdio: ['ignore', 'ignore', 'inherit'] });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  if (TREE === undefined) generate(DIR);
  const work = mkdtempSync(join(tmpdir(), 'ms-bench-capture-out-'));
  const q = `'${DIR.replace(/'/g, `'\\''`)}'`;
  sh(`tar -cf - -C ${q} . > /dev/null`); // warm the page cache
  let bytes = 0;
  let files = 0;
  const contestants: Array<[string, () => Promise<void>]> = [
    [
      'capture',
      async () => {
        const r = await captureLayer(DIR, { manifestPath: join(work, 'm.jsonl'), ...(WORKERS === undefined ? {} : { hashWorkers: WORKERS }) });
        bytes = r.size;
        files = r.files;
      },
    ],
    ['capture (hash on main thread)', async () => void (await captureLayer(DIR, { manifestPath: join(work, 'm0.jsonl'), hashWorkers: 0 }))],
    ['tar -c | zstd -3 -T0', async () => sh(`tar -cf - -C ${q} . | zstd -q -3 -T0 > /dev/null`)],
    ['tar -c > /dev/null (reads data)', async () => sh(`tar -cf - -C ${q} . > /dev/null`)],
    ['tar -cf /dev/null (skips data)', async () => sh(`tar -cf /dev/null -C ${q} .`)],
  ];
  const times = new Map<string, number[]>(contestants.map(([n]) => [n, []]));
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const [name, run] of contestants) {
      const t0 = performance.now();
      await run();
      times.get(name)!.push((performance.now() - t0) / 1000);
    }
  }
  rmSync(work, { recursive: true, force: true });
  const cap = median(times.get('capture')!);
  console.log(
    `tree: ${files} files, ${(bytes / 1e6).toFixed(0)} MB (${DIR}); ${REPEATS} repeats, medians; ratio = baseline time / capture time (>1: capture is faster)`,
  );
  console.log(
    `${'contestant'.padEnd(34)} ${'median s'.padStart(9)} ${'max s'.padStart(7)} ${'MB/s'.padStart(7)} ${'files/s'.padStart(9)} ${'ratio'.padStart(6)}`,
  );
  for (const [name] of contestants) {
    const ts = times.get(name)!;
    const m = median(ts);
    console.log(
      `${name.padEnd(34)} ${m.toFixed(2).padStart(9)} ${Math.max(...ts)
        .toFixed(2)
        .padStart(7)} ${(bytes / 1e6 / m).toFixed(0).padStart(7)} ${(files / m).toFixed(0).padStart(9)} ${(m / cap).toFixed(2).padStart(6)}`,
    );
  }
}

await main();
