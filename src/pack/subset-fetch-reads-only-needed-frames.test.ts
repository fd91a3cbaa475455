import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestHex, type Digest } from '../cas/digest.js';
import type { LocalRegistry } from '../registry/local.js';
import type { Registry } from '../registry/registry.js';
import type { PackIndex, PackIndexEntry } from './pack-index.js';
import { fetchObjects } from './reader.js';
import { packIntoRegistry, prng, randomBytesSeeded, writeObject } from '../../test/helpers/pack-objects.js';
import type { PackSource } from './writer.js';

/** Passes reads through to a real registry, recording every byte range asked for. */
function counting(inner: Registry): { registry: Registry; reads: Array<{ offset: number; length: number; how: string }> } {
  const reads: Array<{ offset: number; length: number; how: string }> = [];
  const registry: Registry = Object.create(inner) as Registry;
  registry.getBlob = async (d: Digest): Promise<Buffer> => {
    const b = await inner.getBlob(d);
    reads.push({ offset: 0, length: b.length, how: 'whole' });
    return b;
  };
  registry.getBlobRange = (d: Digest, offset: number, length: number): Promise<Buffer> => {
    reads.push({ offset, length, how: 'range' });
    return inner.getBlobRange(d, offset, length);
  };
  registry.openBlob = (d: Digest, range?: { offset: number; length: number }): Promise<Readable> => {
    reads.push({ offset: range?.offset ?? 0, length: range?.length ?? Infinity, how: 'stream' });
    return inner.openBlob(d, range);
  };
  return { registry, reads };
}

let work: string;
let registry: LocalRegistry;
let pack: Digest;
let index: PackIndex;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pack-subset-'));
  await mkdir(join(work, 'src'));
  const rand = prng(11);
  const sources: PackSource[] = [];
  // Incompressible 200 KB objects, two per 512 KiB frame: frames are far enough apart to be read separately.
  for (let i = 0; i < 40; i++) sources.push(await writeObject(join(work, 'src'), `b${i}`, randomBytesSeeded(200_000, rand)));
  // One object above the stream threshold is read as a stream.
  sources.push(await writeObject(join(work, 'src'), 'huge', randomBytesSeeded(17 << 20, rand)));
  const r = await packIntoRegistry(work, sources, { frameBytes: 512 << 10, targetPackBytes: 1 << 30 });
  registry = r.registry;
  pack = r.packs[0]!.pack;
  index = r.packs[0]!.index;
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

function byFrame(): PackIndexEntry[][] {
  const m = new Map<number, PackIndexEntry[]>();
  for (const e of index.entries) m.set(e.frameOffset, [...(m.get(e.frameOffset) ?? []), e]);
  return [...m.values()].sort((a, b) => a[0]!.frameOffset - b[0]!.frameOffset);
}

describe('fetching a subset', () => {
  it('reads exactly the frame of one wanted object', async () => {
    const frames = byFrame();
    const want = frames[5]![0]!;
    const c = counting(registry);
    const dest = await mkdtemp(join(work, 'dest-'));
    const r = await fetchObjects(c.registry, pack, [want], dest);
    expect(c.reads).toEqual([{ offset: want.frameOffset, length: want.frameLength, how: 'range' }]);
    expect(r.fetchedBytes).toBe(want.frameLength);
    expect(await readdir(dest)).toEqual([digestHex(want.digest)]);
  });

  it('coalesces neighbouring frames into one read and keeps distant ones apart', async () => {
    const frames = byFrame();
    const near = [frames[2]![0]!, frames[3]![1]!];
    const far = frames[12]![0]!;
    const c = counting(registry);
    const dest = await mkdtemp(join(work, 'dest-'));
    await fetchObjects(c.registry, pack, [...near, far], dest, { concurrency: 1 });
    expect(c.reads).toEqual([
      { offset: near[0]!.frameOffset, length: near[1]!.frameOffset + near[1]!.frameLength - near[0]!.frameOffset, how: 'range' },
      { offset: far.frameOffset, length: far.frameLength, how: 'range' },
    ]);
    expect((await readdir(dest)).sort()).toEqual([...near, far].map((e) => digestHex(e.digest)).sort());
  });

  it('streams a large frame instead of buffering it', async () => {
    const huge = index.entries.find((e) => e.size === 17 << 20)!;
    const c = counting(registry);
    const dest = await mkdtemp(join(work, 'dest-'));
    await fetchObjects(c.registry, pack, [huge], dest);
    expect(c.reads).toEqual([{ offset: huge.frameOffset, length: huge.frameLength, how: 'stream' }]);
    expect(await readdir(dest)).toEqual([digestHex(huge.digest)]);
  });
});
