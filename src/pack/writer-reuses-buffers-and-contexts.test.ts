/**
 * The writer recycles its memory: frame buffers go to a compression worker and come back holding
 * the compressed frame, medium files are read ahead into regions of one ring, and one zstd
 * streaming context compresses every large object, across packs. Each reuse is a chance to
 * hand out bytes still in use, so every object must come back intact when much of each kind
 * passes through one writer.
 */
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestHex } from '../cas/digest.js';
import { fetchObjects } from './reader.js';
import { packIntoRegistry, prng, randomBytesSeeded, sourceText, writeObject } from '../../test/helpers/pack-objects.js';
import type { PackSource } from './writer.js';

let work: string;
let sources: PackSource[];
const FRAME = 256 << 10;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pack-reuse-'));
  const src = join(work, 'src');
  await mkdir(src);
  const rand = prng(11);
  sources = [];
  for (let i = 0; i < 300; i++) {
    const kind = i % 10;
    let data: Buffer;
    // medium (read ahead, above the 64 KiB inline limit, up to a frame: the ring wraps often)
    if (kind < 3) data = sourceText(65 * 1024 + Math.floor(rand() * (FRAME - 65 * 1024)), rand);
    else if (kind === 3) data = randomBytesSeeded(65 * 1024 + Math.floor(rand() * 100_000), rand);
    // large (a streamed frame of its own), alternately compressible and not
    else if (kind === 4 && i % 20 === 4) data = sourceText(FRAME + 1 + Math.floor(rand() * 600_000), rand);
    else if (kind === 4) data = randomBytesSeeded(FRAME + 1 + Math.floor(rand() * 600_000), rand);
    // small (read straight into the frame)
    else data = sourceText(Math.floor(rand() * 20_000), rand);
    sources.push(await writeObject(src, `o${i}`, data));
  }
}, 600_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('a writer reusing its buffers and compression contexts', () => {
  it('gives back every object byte for byte, over many frames, ring wraps, large objects and packs', async () => {
    const { registry, packs } = await packIntoRegistry(work, sources, { frameBytes: FRAME, targetPackBytes: 2 << 20 });
    expect(packs.length).toBeGreaterThan(2);
    const frames = packs.reduce((n, p) => n + p.index.frames.length, 0);
    expect(frames).toBeGreaterThan(40);
    const dest = join(work, 'dest');
    await mkdir(dest);
    for (const p of packs) await fetchObjects(registry, p.pack, p.index.entries, dest);
    for (const s of sources) {
      const same = (await readFile(join(dest, digestHex(s.digest)))).equals(await readFile(s.path));
      expect(same, `object ${String(s.path)} (${s.size} bytes)`).toBe(true);
    }
  }, 600_000);
});
