/**
 * Pack throughput and size against the tools a user would otherwise reach for.
 *
 *   packing:   hash + PackWriter of every file          vs  tar -c | zstd -3 -T0
 *   unpacking: fetchObjects of everything (empty dir)   vs  zstd -d | tar -x
 *   bytes:     packs + indexes                          vs  the .tar.zst
 *
 * The tree is built from real files on this machine (node_modules, /usr/share, /usr/lib: source,
 * docs, ELF binaries), each copy made unique, plus a few large files. Scale with
 * BENCH_FILES (default 50000), BENCH_LARGE_MB (default 4 files of 50 MB), BENCH_REPEATS (3).
 *
 *   npx tsx bench/pack.ts
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Digest } from '../src/cas/digest.js';
import { publishPacks } from '../src/pack/publish.js';
import { fetchObjects, parsePackIndex } from '../src/pack/reader.js';
import { prng } from '../test/helpers/pack-objects.js';
import { realFiles } from './real-files.js';
import { PackWriter, type PackSource } from '../src/pack/writer.js';
import { LocalRegistry } from '../src/registry/local.js';

const FILES = Number(process.env.BENCH_FILES ?? 50_000);
const LARGE_MB = Number(process.env.BENCH_LARGE_MB ?? 50);
const LARGE_COUNT = Number(process.env.BENCH_LARGE_COUNT ?? 4);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);

async function buildTree(dir: string): Promise<{ sources: PackSource[]; bytes: number }> {
  const rand = prng(42);
  const pool = realFiles(60_000, 8 << 20);
  const sources: PackSource[] = [];
  let bytes = 0;
  const add = async (name: string, data: Buffer): Promise<void> => {
    const path = join(dir, name);
    await writeFile(path, data);
    const digest: Digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    sources.push({ digest, size: data.length, path });
    bytes += data.length;
  };
  for (let i = 0; i < FILES; i++) {
    const c = pool[Math.floor(rand() * pool.length)]!;
    // A unique trailer keeps every copy a distinct object, as capture's dedup would leave them.
    const data = Buffer.concat([await readFile(c.path), Buffer.from(`\n#${i}\n`)]);
    const sub = join(dir, String(i % 100));
    if (i < 100) await mkdir(sub, { recursive: true });
    await add(join(String(i % 100), `f${i}`), data);
  }
  for (let i = 0; i < LARGE_COUNT; i++) {
    const parts: Buffer[] = [];
    let n = 0;
    while (n < LARGE_MB << 20) {
      const c = pool[Math.floor(rand() * pool.length)]!;
      const b = await readFile(c.path);
      parts.push(b);
      n += b.length;
    }
    await add(`large${i}`, Buffer.concat(parts).subarray(0, LARGE_MB << 20));
  }
  return { sources, bytes };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Wall time and peak RSS growth over the RSS at the start (building the tree inflates the baseline). */
async function timed(f: () => Promise<void>): Promise<{ ms: number; peakRss: number }> {
  const start = process.memoryUsage().rss;
  let peak = start;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 25);
  const t = performance.now();
  try {
    await f();
  } finally {
    clearInterval(timer);
  }
  return { ms: performance.now() - t, peakRss: Math.max(peak, process.memoryUsage().rss) - start };
}

function sh(cmd: string): void {
  execFileSync('bash', ['-o', 'pipefail', '-c', cmd], { stdio: ['ignore', 'ignore', 'inherit'] });
}

async function dirBytes(dir: string): Promise<number> {
  let n = 0;
  for (const name of readdirSync(dir)) n += (await stat(join(dir, name))).size;
  return n;
}

const fmt = (n: number, d = 1): string => n.toFixed(d);
const mb = (n: number): string => fmt(n / 1e6);

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'bench-pack-'));
  try {
    const tree = join(work, 'tree');
    await mkdir(tree);
    const t0 = performance.now();
    const { sources, bytes } = await buildTree(tree);
    console.log(`tree: ${sources.length} files, ${mb(bytes)} MB (built in ${fmt((performance.now() - t0) / 1000)} s)`);

    const ours: number[] = [];
    const base: number[] = [];
    const oursX: number[] = [];
    const baseX: number[] = [];
    let packPeak = 0;
    let fetchPeak = 0;
    let packBytes = 0;
    let indexBytes = 0;
    let packCount = 0;
    const tarZst = join(work, 'tree.tar.zst');
    for (let r = 0; r < REPEATS; r++) {
      const out = join(work, `packs${r}`);
      await mkdir(out);
      const regDir = join(work, `registry${r}`);
      await rm(regDir, { recursive: true, force: true });
      const registry = new LocalRegistry(regDir);
      // Ours: every object re-hashed while read (capture's hashing cost), tarred, framed, compressed.
      const p = await timed(async () => {
        const w = new PackWriter({ tempDir: out, verifyDigests: true });
        for (const s of sources) await w.add(s);
        const packs = await w.finish();
        packBytes = packs.reduce((n, x) => n + x.packBytes, 0);
        indexBytes = packs.reduce((n, x) => n + x.indexBytes.length, 0);
        packCount = packs.length;
        await publishPacks(registry, packs);
      });
      ours.push(p.ms);
      packPeak = Math.max(packPeak, p.peakRss);
      base.push((await timed(async () => sh(`tar -cf - -C '${tree}' . | zstd -q -3 -T0 -f -o '${tarZst}'`))).ms);

      const dest = join(work, `dest${r}`);
      await mkdir(dest);
      const f = await timed(async () => {
        for await (const { pack, index } of registry.listPacks()) {
          const idx = parsePackIndex(await registry.getBlob(index), index);
          await fetchObjects(registry, pack, idx.entries, dest);
        }
      });
      oursX.push(f.ms);
      fetchPeak = Math.max(fetchPeak, f.peakRss);
      if (r === 0 && (await dirBytes(dest)) !== bytes) throw new Error('fetched bytes differ from the tree');
      const xdir = join(work, `x${r}`);
      await mkdir(xdir);
      baseX.push((await timed(async () => sh(`zstd -q -d -c '${tarZst}' | tar -x -C '${xdir}'`))).ms);
      console.log(
        `run ${r + 1}: pack ${fmt(ours[r]! / 1000, 2)} s vs ${fmt(base[r]! / 1000, 2)} ` +
          `s; unpack ${fmt(oursX[r]! / 1000, 2)} s vs ${fmt(baseX[r]! / 1000, 2)} s`,
      );
      await rm(dest, { recursive: true, force: true });
      await rm(xdir, { recursive: true, force: true });
      await rm(out, { recursive: true, force: true });
      await rm(regDir, { recursive: true, force: true });
    }
    const tarZstBytes = (await stat(tarZst)).size;
    const row = (name: string, a: number[], b: number[], bname: string): void => {
      const ma = median(a);
      const mbm = median(b);
      console.log(
        `${name.padEnd(10)} ours ${fmt(ma / 1000, 2)} s (${fmt(bytes / 1e6 / (ma / 1000), 0)} MB/s, ` +
          `${fmt(sources.length / (ma / 1000), 0)} files/s, max ${fmt(Math.max(...a) / 1000, 2)} s)` +
          ` | ${bname} ${fmt(mbm / 1000, 2)} s (${fmt(bytes / 1e6 / (mbm / 1000), 0)} MB/s) | throughput ratio ours/baseline ${fmt(mbm / ma, 2)}`,
      );
    };
    console.log(`medians over ${REPEATS} runs:`);
    row('pack', ours, base, 'tar|zstd -3 -T0');
    row('unpack', oursX, baseX, 'zstd -d|tar -x');
    console.log(
      `bytes: ${packCount} packs ${mb(packBytes)} MB + indexes ${mb(indexBytes)} MB vs tar.zst ${mb(tarZstBytes)} ` +
        `MB: ratio ${fmt((packBytes + indexBytes) / tarZstBytes, 3)}; compression ${fmt(bytes / packBytes, 2)}x`,
    );
    console.log(
      `peak RSS growth: packing ${mb(packPeak)} MB, fetching ${mb(fetchPeak)} MB (process RSS after building the tree: ${mb(process.memoryUsage().rss)} MB)`,
    );
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

await main();
