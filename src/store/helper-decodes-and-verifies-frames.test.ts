import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compress } from 'zstd-napi';
import { type Digest, sha256 } from '../cas/digest.js';
import type { PackIndexEntry } from '../pack/pack-index.js';
import { FsmetaStream, type FileMeta } from './fsmeta.js';

const work = mkdtempSync(join(tmpdir(), 'ms-helper-frames-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const PACK: Digest = `sha256:${'ab'.repeat(32)}`;
const META: FileMeta = { mode: 0o640, uid: 0, gid: 0, mtime: '1600000000123456789' };

/** A decoded frame holding `sizes` objects (each after a 512-byte gap, as tar headers leave) and its wanted entries. */
function frameOf(sizes: number[], seed = 1): { raw: Buffer; objects: Buffer[]; wanted: PackIndexEntry[] } {
  const objects = sizes.map((n, k) => {
    const b = Buffer.alloc(n);
    for (let i = 0; i + 4 <= n; i += 4) b.writeUInt32LE(((i + 1) * 2654435761 + k * 97 + seed) >>> 0, i);
    return b;
  });
  const parts: Buffer[] = [];
  const offsets: number[] = [];
  let at = 0;
  for (const o of objects) {
    parts.push(Buffer.alloc(512));
    at += 512;
    offsets.push(at);
    const padded = Math.ceil(o.length / 512) * 512;
    parts.push(o, Buffer.alloc(padded - o.length));
    at += padded;
  }
  parts.push(Buffer.alloc(1024));
  const raw = Buffer.concat(parts);
  const wanted = objects.map((o, k) => ({
    digest: sha256(o),
    size: o.length,
    frameOffset: 0,
    frameLength: 0,
    frameRawLength: raw.length,
    offset: offsets[k]!,
  }));
  return { raw, objects, wanted };
}

let n = 0;
async function helper(): Promise<{ stream: FsmetaStream; tree: string; spill: string }> {
  const dir = join(work, `case-${n++}`);
  const tree = join(dir, 'tree');
  const spill = join(dir, 'spill');
  mkdirSync(tree, { recursive: true });
  mkdirSync(spill);
  const stream = await FsmetaStream.start(tree);
  // bin/setup installs libzstd-dev and libssl-dev: without them this path would go untested
  expect(stream.decodesFrames).toBe(true);
  return { stream, tree, spill };
}

function hex(d: Digest): string {
  return d.slice('sha256:'.length);
}

describe('the lay-out helper decodes pack frames and verifies every object before placing it', () => {
  it('places objects of a frame sent in records and of one read from a file, with their metadata', async () => {
    const { stream, tree, spill } = await helper();
    stream.spillTo(spill, 64 << 20);
    const a = frameOf([1000, 5000, 0 + 3]);
    const b = frameOf([70_000], 2);
    const z = compress(b.raw);
    const file = join(spill, '..', 'pack');
    // the frame sits after other bytes in the file, as frames do in a pack
    writeFileSync(file, Buffer.concat([Buffer.from('x'.repeat(100)), z, Buffer.from('trailing')]));
    stream.frame(PACK, { offset: 0, length: 0, rawLength: a.raw.length }, a.wanted, compress(a.raw));
    stream.frame(PACK, { offset: 100, length: z.length, rawLength: b.raw.length }, b.wanted, { file });
    const pool = join(spill, '..', 'pool');
    mkdirSync(pool);
    a.wanted.forEach((w, k) => stream.placeObject(`a${k}`, META, join(pool, `a${k}`), hex(w.digest)));
    stream.placeObject('b0', { ...META, mode: 0o4755 }, '', hex(b.wanted[0]!.digest));
    await stream.close();
    a.objects.forEach((o, k) => {
      expect(readFileSync(join(tree, `a${k}`)).equals(o)).toBe(true);
      // linked into the pool (on the helper's linking thread) before it exited
      expect(lstatSync(join(pool, `a${k}`)).ino).toBe(lstatSync(join(tree, `a${k}`)).ino);
    });
    expect(readFileSync(join(tree, 'b0')).equals(b.objects[0]!)).toBe(true);
    const st = lstatSync(join(tree, 'a1'), { bigint: true });
    expect(Number(st.mode & 0o7777n)).toBe(0o640);
    expect(st.mtimeNs).toBe(1600000000123456789n);
    expect(Number(lstatSync(join(tree, 'b0')).mode & 0o7777)).toBe(0o4755);
    // nothing went to disk: the budget held every frame
    expect(readdirSync(spill)).toEqual([]);
  });

  it('an object whose bytes are not its digest fails naming the object and the pack', async () => {
    const { stream, spill } = await helper();
    stream.spillTo(spill, 64 << 20);
    const f = frameOf([4096, 4096]);
    const lie = { ...f.wanted[1]!, digest: sha256(Buffer.from('something else')) };
    stream.frame(PACK, { offset: 7, length: 0, rawLength: f.raw.length }, [f.wanted[0]!, lie], compress(f.raw));
    stream.placeObject('x', META, '', hex(f.wanted[0]!.digest));
    stream.placeObject('y', META, '', hex(lie.digest));
    const err = await stream.close().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'DIGEST_MISMATCH' });
    expect(String(err)).toContain(`object ${lie.digest} in pack ${PACK}`);
    expect(String(err)).toContain(`got ${f.wanted[1]!.digest}`);
  });

  it.each([
    ['decodes to more bytes than its index states', (raw: Buffer, z: Buffer) => ({ rawLength: raw.length - 512, z }), /decodes to|too small|does not decode/],
    ['decodes to fewer bytes than its index states', (raw: Buffer, z: Buffer) => ({ rawLength: raw.length + 512, z }), /decodes to \d+ bytes, stated/],
    ['is cut short', (raw: Buffer, z: Buffer) => ({ rawLength: raw.length, z: z.subarray(0, z.length - 20) }), /does not decode|decodes to/],
  ])('a frame that %s is a corrupt pack naming its objects', async (_what, mangle, why) => {
    const { stream, spill } = await helper();
    stream.spillTo(spill, 64 << 20);
    const f = frameOf([3000, 9000]);
    const { rawLength, z } = mangle(f.raw, compress(f.raw));
    stream.frame(PACK, { offset: 4096, length: z.length, rawLength }, f.wanted, z);
    stream.placeObject('x', META, '', hex(f.wanted[0]!.digest));
    const err = await stream.close().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'CORRUPT_PACK' });
    expect(String(err)).toMatch(why);
    expect(String(err)).toContain(`pack ${PACK}, frame at 4096`);
    expect(String(err)).toContain(f.wanted[0]!.digest);
  });

  it('a frame its pack file is too short for is a truncated pack', async () => {
    const { stream, spill } = await helper();
    stream.spillTo(spill, 64 << 20);
    const f = frameOf([3000]);
    const z = compress(f.raw);
    const file = join(spill, '..', 'short-pack');
    writeFileSync(file, z.subarray(0, z.length - 1));
    stream.frame(PACK, { offset: 0, length: z.length, rawLength: f.raw.length }, f.wanted, { file });
    stream.placeObject('x', META, '', hex(f.wanted[0]!.digest));
    const err = await stream.close().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'CORRUPT_PACK' });
    expect(String(err)).toMatch(/truncated pack/);
  });

  it('with no memory budget every object waits on disk, and is still placed and pooled', async () => {
    const { stream, tree, spill } = await helper();
    stream.spillTo(spill, 0);
    const f = frameOf([2000, 100_000, 7]);
    stream.frame(PACK, { offset: 0, length: 0, rawLength: f.raw.length }, f.wanted, compress(f.raw));
    const pool = join(spill, '..', 'pool');
    mkdirSync(pool);
    f.wanted.forEach((w, k) => stream.placeObject(`f${k}`, META, join(pool, `p${k}`), hex(w.digest)));
    await stream.close();
    f.objects.forEach((o, k) => {
      expect(readFileSync(join(tree, `f${k}`)).equals(o)).toBe(true);
      // the spilled file itself became the tree's file and the pool's
      expect(lstatSync(join(tree, `f${k}`)).ino).toBe(lstatSync(join(pool, `p${k}`)).ino);
      expect(Number(lstatSync(join(tree, `f${k}`)).mode & 0o7777)).toBe(0o640);
    });
    // moved out of the spill directory, not copied
    expect(readdirSync(spill).flatMap((d) => readdirSync(join(spill, d)))).toEqual([]);
  });

  describe('a frame too large to hold in memory streams from its file into the spill directory', () => {
    const big = frameOf([(20 << 20) + 123], 5);
    const z = compress(big.raw);
    const file = join(work, 'big-pack');
    writeFileSync(file, z);
    const frame = { offset: 0, length: z.length, rawLength: big.raw.length };

    it('and lands whole', async () => {
      const { stream, tree, spill } = await helper();
      stream.spillTo(spill, 64 << 20);
      stream.frame(PACK, frame, big.wanted, { file });
      stream.placeObject('big', META, '', hex(big.wanted[0]!.digest));
      await stream.close();
      expect(readFileSync(join(tree, 'big')).equals(big.objects[0]!)).toBe(true);
    });

    it('and a wrong digest still names the object', async () => {
      const { stream, tree, spill } = await helper();
      stream.spillTo(spill, 64 << 20);
      const lie = { ...big.wanted[0]!, digest: sha256(Buffer.from('not it')) };
      stream.frame(PACK, frame, [lie], { file });
      stream.placeObject('big', META, '', hex(lie.digest));
      const err = await stream.close().catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'DIGEST_MISMATCH' });
      expect(String(err)).toContain(lie.digest);
      expect(existsSync(join(tree, 'big'))).toBe(false);
    });

    it('and output past its stated length stops the decoding (a zstd bomb)', async () => {
      const { stream, spill } = await helper();
      stream.spillTo(spill, 64 << 20);
      // a good small object first, then 20 MiB more than the index admits to
      const bomb = frameOf([1000, 20 << 20], 6);
      const bz = compress(bomb.raw);
      const bombFile = join(spill, '..', 'bomb-pack');
      writeFileSync(bombFile, bz);
      stream.frame(PACK, { offset: 0, length: bz.length, rawLength: 17 << 20 }, [bomb.wanted[0]!], { file: bombFile });
      stream.placeObject('small', META, '', hex(bomb.wanted[0]!.digest));
      const err = await stream.close().catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'CORRUPT_PACK' });
      expect(String(err)).toMatch(/decodes to more than the stated 17825792 bytes/);
    });
  });
});
