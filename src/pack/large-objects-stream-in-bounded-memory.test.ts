import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestHex, type Digest } from '../cas/digest.js';
import { fetchObjects } from './reader.js';
import { packIntoRegistry, prng, randomBytesSeeded } from '../../test/helpers/pack-objects.js';
import type { PackSource } from './writer.js';

const SIZE = 320 << 20;
/**
 * Allowed RSS growth while packing or fetching the object. Measured: about 100 MiB when packing
 * (two compression-thread isolates plus zstd's multithreaded job buffers), the same for a 900 MB
 * object; near 0 when fetching. Holding the object would exceed it by far.
 */
const RSS_BUDGET = 160 << 20;

let work: string;
let big: PackSource;

/** Peak RSS above the starting point while `f` runs, sampled every 20 ms. */
async function peakRssGrowth(f: () => Promise<void>): Promise<number> {
  const start = process.memoryUsage().rss;
  let peak = start;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  try {
    await f();
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, process.memoryUsage().rss) - start;
}

async function hashFile(path: string): Promise<Digest> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path, { highWaterMark: 1 << 20 })) h.update(c as Buffer);
  return `sha256:${h.digest('hex')}`;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pack-large-'));
  await mkdir(join(work, 'src'));
  // Varied 1 MiB pieces (half random, half repeated) so the frame is neither trivial nor incompressible.
  const rand = prng(5);
  const path = join(work, 'src', 'big');
  const fh = await open(path, 'w');
  const h = createHash('sha256');
  const fixed = randomBytesSeeded(512 << 10, rand);
  for (let off = 0; off < SIZE; off += 1 << 20) {
    const piece = Buffer.concat([randomBytesSeeded(512 << 10, rand), fixed]);
    h.update(piece);
    await fh.write(piece);
  }
  await fh.close();
  big = { digest: `sha256:${h.digest('hex')}`, size: SIZE, path };
}, 600_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('a multi-hundred-MB object', () => {
  it('packs and fetches streaming, with RSS growth far below its size', async () => {
    let packed!: Awaited<ReturnType<typeof packIntoRegistry>>;
    const packGrowth = await peakRssGrowth(async () => {
      packed = await packIntoRegistry(work, [big]);
    });
    const { registry, packs } = packed;
    expect(packs).toHaveLength(1);
    const entry = packs[0]!.index.entries[0]!;
    expect(entry.size).toBe(SIZE);
    expect(entry.frameLength).toBeGreaterThan(SIZE / 2); // really compressed as one large frame

    const dest = join(work, 'dest');
    await mkdir(dest);
    const fetchGrowth = await peakRssGrowth(async () => {
      await fetchObjects(registry, packs[0]!.pack, [entry], dest);
    });
    const out = join(dest, digestHex(big.digest));
    expect((await stat(out)).size).toBe(SIZE);
    expect(await hashFile(out)).toBe(big.digest);
    expect(packGrowth).toBeLessThan(RSS_BUDGET);
    expect(fetchGrowth).toBeLessThan(RSS_BUDGET);
  }, 600_000);
});
