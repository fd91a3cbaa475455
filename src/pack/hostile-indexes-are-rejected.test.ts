import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compress } from 'zstd-napi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256, type Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError } from '../errors.js';
import type { LocalRegistry } from '../registry/local.js';
import { CorruptPackError } from './errors.js';
import { encodePackIndex, PACK_INDEX_FORMAT, parsePackIndex, type PackIndex, type PackIndexEntry, type PackIndexFile } from './pack-index.js';
import { fetchObjects } from './reader.js';
import { packIntoRegistry, prng, sourceText, writeObject } from '../../test/helpers/pack-objects.js';
import type { PackSource } from './writer.js';
import { decompressBounded } from './zstd-bounded.js';

const D = (n: number): Digest => sha256(String(n));
const PACK = D(0);

function file(over: Partial<PackIndexFile>): PackIndexFile {
  return {
    format: PACK_INDEX_FORMAT,
    pack: PACK,
    packSize: 300,
    frames: [
      { offset: 0, length: 100, rawLength: 4096 },
      { offset: 100, length: 200, rawLength: 2048 },
    ],
    objects: [
      { digest: D(1), size: 100, frame: 0, offset: 512 },
      { digest: D(2), size: 1000, frame: 1, offset: 512 },
    ],
    ...over,
  };
}

function parse(f: PackIndexFile): PackIndex {
  const { bytes, digest } = encodePackIndex(f);
  return parsePackIndex(bytes, digest);
}

describe('parsePackIndex', () => {
  it('accepts a well-formed index and flattens it into self-contained entries', () => {
    const idx = parse(file({}));
    expect(idx.entries.find((e) => e.digest === D(2))).toEqual({
      digest: D(2),
      size: 1000,
      frameOffset: 100,
      frameLength: 200,
      frameRawLength: 2048,
      offset: 512,
    });
  });

  it.each<[string, Partial<PackIndexFile>, RegExp]>([
    ['frames ending past the pack', { packSize: 250 }, /frames end at 300/],
    [
      'overlapping frames',
      {
        frames: [
          { offset: 0, length: 100, rawLength: 4096 },
          { offset: 50, length: 250, rawLength: 2048 },
        ],
      },
      /frame 1 starts at 50/,
    ],
    [
      'a gap between frames',
      {
        frames: [
          { offset: 0, length: 100, rawLength: 4096 },
          { offset: 120, length: 180, rawLength: 2048 },
        ],
      },
      /frame 1 starts at 120/,
    ],
    ['an object past its frame', { objects: [{ digest: D(1), size: 4000, frame: 0, offset: 512 }] }, /ends past its frame/],
    ['an object in a missing frame', { objects: [{ digest: D(1), size: 10, frame: 7, offset: 512 }] }, /names frame 7/],
    [
      'overlapping objects',
      {
        objects: [
          { digest: D(1), size: 1000, frame: 0, offset: 512 },
          { digest: D(3), size: 10, frame: 0, offset: 1024 },
        ],
      },
      /overlaps/,
    ],
    ['an absurd size', { objects: [{ digest: D(1), size: 2 ** 60, frame: 0, offset: 512 }] }, /objects/],
    [
      'a duplicated object',
      {
        objects: [
          { digest: D(1), size: 10, frame: 0, offset: 512 },
          { digest: D(1), size: 10, frame: 0, offset: 1536 },
        ],
      },
      /duplicated/,
    ],
    [
      'a frame length that is not whole tar blocks',
      {
        frames: [
          { offset: 0, length: 100, rawLength: 4000 },
          { offset: 100, length: 200, rawLength: 2048 },
        ],
      },
      /frames/,
    ],
  ])('rejects %s', (_name, over, msg) => {
    const f = file(over);
    // encodePackIndex sorts objects, so "duplicated" is still caught by the sortedness check.
    expect(() => parse(f)).toThrow(InvalidInputError);
    expect(() => parse(f)).toThrow(msg);
  });

  it('rejects bytes that do not match the index digest, and bytes that are not zstd', () => {
    const { bytes } = encodePackIndex(file({}));
    expect(() => parsePackIndex(bytes, D(9))).toThrow(DigestMismatchError);
    const junk = Buffer.from('not an index');
    expect(() => parsePackIndex(junk, sha256(junk))).toThrow(CorruptPackError);
  });

  it('stops decoding at the stated bound (zstd bomb defence)', () => {
    const bomb = compress(Buffer.alloc(8 << 20));
    expect(bomb.length).toBeLessThan(4096);
    expect(() => decompressBounded(bomb, 1 << 20)).toThrow(/more than/);
    expect(decompressBounded(bomb, 8 << 20).length).toBe(8 << 20);
  });
});

describe('fetchObjects with lying entries', () => {
  let work: string;
  let registry: LocalRegistry;
  let pack: Digest;
  let index: PackIndex;
  let middle: PackIndexEntry;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'pack-hostile-'));
    await mkdir(join(work, 'src'));
    const rand = prng(3);
    const sources: PackSource[] = [];
    for (let i = 0; i < 30; i++) sources.push(await writeObject(join(work, 'src'), `t${i}`, sourceText(6000, rand)));
    const r = await packIntoRegistry(work, sources, { frameBytes: 32 << 10 });
    registry = r.registry;
    pack = r.packs[0]!.pack;
    index = r.packs[0]!.index;
    const f = index.frames[2]!;
    middle = index.entries.filter((e) => e.frameOffset === f.offset).sort((a, b) => a.offset - b.offset)[0]!;
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  async function fetchErr(e: PackIndexEntry, decoder: 'inline' | 'worker' = 'inline'): Promise<Error> {
    const dest = await mkdtemp(join(work, 'dest-'));
    return fetchObjects(registry, pack, [e], dest, { decoder }).then(
      () => new Error('fetch succeeded'),
      (err: unknown) => err as Error,
    );
  }

  it('the honest entry fetches', async () => {
    expect((await fetchErr(middle)).message).toBe('fetch succeeded');
  });

  describe.each(['inline', 'worker'] as const)('frames decoded %s', (decoder) => {
    it.each<[string, (e: PackIndexEntry) => PackIndexEntry, RegExp]>([
      ['a decoded length smaller than reality', (e) => ({ ...e, frameRawLength: e.frameRawLength - 1024 }), /more than the stated/],
      ['a decoded length larger than reality', (e) => ({ ...e, frameRawLength: e.frameRawLength + 1024 }), /stated/],
      ['a compressed length smaller than reality', (e) => ({ ...e, frameLength: e.frameLength - 10 }), /ends mid-frame/],
      ['a compressed length larger than reality', (e) => ({ ...e, frameLength: e.frameLength + 10 }), /follow the end of the frame/],
      ['a frame out of the pack', (e) => ({ ...e, frameOffset: index.packSize + 100 }), /truncated/],
    ])('rejects %s with CorruptPackError naming the object', async (_name, lie, msg) => {
      const err = await fetchErr(lie(middle), decoder);
      expect(err).toBeInstanceOf(CorruptPackError);
      expect(err.message).toMatch(msg);
      expect(err.message).toContain(middle.digest);
    });
  });

  it('rejects entries whose frames overlap', async () => {
    const other = index.entries.find((e) => e.frameOffset !== middle.frameOffset)!;
    const dest = await mkdtemp(join(work, 'dest-'));
    const lie = { ...other, frameOffset: middle.frameOffset + 1 };
    await expect(fetchObjects(registry, pack, [middle, lie], dest)).rejects.toThrow(/overlap/);
  });
});
