import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { manyEntryTar } from '../../test/helpers/many-entry-tar.js';
import { makeTar, type TarItem } from '../../test/helpers/oci-layout.js';
import { decompress } from 'zstd-napi';
import { readManifest } from '../layer/manifest-read.js';
import type { Entry } from '../layer/manifest.js';
import { LocalRegistry } from '../registry/local.js';
import { ensureManifest } from '../store/pull.js';
import { StorePaths } from '../store/paths.js';
import { convertLayer, type ConvertResult } from './layer-convert.js';

const work = mkdtempSync(join(tmpdir(), 'ms-many-entries-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
async function convert(chunks: AsyncIterable<Buffer>, runEntries?: number): Promise<{ r: ConvertResult; reg: LocalRegistry }> {
  const reg = new LocalRegistry(join(work, `reg-${n}`));
  const r = await convertLayer(reg, chunks, {
    workDir: join(work, `w-${n++}`),
    catalog: new Map(),
    what: 'test layer',
    ...(runEntries === undefined ? {} : { runEntries }),
  });
  return { r, reg };
}

async function* once(b: Buffer): AsyncGenerator<Buffer> {
  yield b;
}

async function entriesOf(reg: LocalRegistry, r: ConvertResult): Promise<Entry[]> {
  const out: Entry[] = [];
  for await (const e of readManifest(await ensureManifest(reg, new StorePaths(join(work, `store-${n++}`)), r.layer), 'test')) out.push(e);
  return out;
}

/** The paths of the layer's list of implicit directories. */
async function implicitList(reg: LocalRegistry, r: ConvertResult): Promise<string[]> {
  if (r.implicitDirs === undefined) return [];
  const text = decompress(await reg.getBlob(r.implicitDirs)).toString('utf8');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as string);
}

describe('a layer of many entries converts in bounded memory', () => {
  it('200,000 files (a generated tar stream) hold at most one run of entries at once, and give the layer the in-memory conversion gave', async () => {
    const { r } = await convert(manyEntryTar({ dirs: 500, perDir: 400 }));
    expect(r.layer.entries).toBe(500 + 200_000 + 3);
    // one run of 16,384 records plus the two hardlinks and the versions of the paths they name
    expect(r.maxEntriesHeld).toBeLessThanOrEqual(16_384 + 16);
    expect(r.runs).toBeGreaterThanOrEqual(12);
    // the digest the converter gave for this tar when it sorted every entry in memory (before the merge sort)
    expect(r.layer.digest).toBe('sha256:4e194f9771ceccc6520fbc6ea529a5a5f7f3d9d676e12907c95c2e21fbe70e27');
  }, 180_000);

  it('spilled runs and one in-memory run give the same manifest, overrides, whiteouts and hardlinks included', async () => {
    const gen = { dirs: 40, perDir: 50, contentEvery: 7 };
    const mem = await convert(manyEntryTar(gen), 1e9);
    const spilled = await convert(manyEntryTar(gen), 64);
    expect(mem.r.runs).toBe(0);
    expect(spilled.r.runs).toBeGreaterThan(30);
    expect(spilled.r.maxEntriesHeld).toBeLessThanOrEqual(64 + 16);
    expect(spilled.r.layer).toEqual(mem.r.layer);
    const es = await entriesOf(spilled.reg, spilled.r);
    const byPath = new Map(es.map((e) => [e.path, e]));
    // a link's name sorts first: it is the group's file, the original name links to it
    expect(byPath.get('d0/link-a')).toMatchObject({ type: 'file', size: 0 });
    expect(byPath.get('d1/f0')).toEqual({ type: 'hardlink', path: 'd1/f0', target: 'd0/link-a' });
    expect(byPath.get('d1/link-b')).toEqual({ type: 'hardlink', path: 'd1/link-b', target: 'd0/link-a' });
    expect(byPath.get('d0/f0')).toMatchObject({ type: 'file', size: 9 });
    expect(byPath.get('d2/gone')).toEqual({ type: 'whiteout', path: 'd2/gone' });
    expect(byPath.get('d3')).toMatchObject({ type: 'dir', opaque: true });
  });

  it('edge cases of tar order merge the same from runs of two records as from one run', async () => {
    const t = await makeTar([
      { name: 'a/', type: 'directory' },
      { name: 'a/x', data: 'x' },
      { name: 'a', data: 'a is a file now' }, // a directory replaced: what was below it goes
      { name: 'b', data: 'b1' },
      { name: 'c', type: 'link', linkname: 'b' },
      { name: 'b', data: 'b2' }, // the link keeps b1; b is itself again
      { name: 'e', type: 'link', linkname: 'c' }, // a link to a link joins its group
      { name: 'c', data: 'c is a file now' },
      { name: 'f', data: 'f' },
      { name: 'f', type: 'link', linkname: 'f' },
      { name: 'g/', type: 'directory' },
      { name: '.wh.g', data: '' }, // deleted below and recreated: opaque
      { name: 'h/.wh..wh..opq', data: '' },
      { name: 'a-b', data: 'sorts between a and a/' },
    ]);
    const one = await convert(once(t), 1e9);
    const two = await convert(once(t), 2);
    expect(two.r.runs).toBeGreaterThan(3);
    expect(two.r.layer).toEqual(one.r.layer);
    const es = await entriesOf(two.reg, two.r);
    expect(es.map((e) => [e.path, e.type])).toEqual([
      ['a', 'file'],
      ['a-b', 'file'],
      ['b', 'file'],
      ['c', 'file'],
      ['e', 'file'],
      ['f', 'file'],
      ['g', 'dir'],
      ['h', 'dir'],
    ]);
    const byPath = new Map(es.map((e) => [e.path, e]));
    expect(byPath.get('e')).toMatchObject({ size: 2 });
    expect(byPath.get('b')).toMatchObject({ size: 2 });
    expect(byPath.get('g')).toMatchObject({ opaque: true });
    expect(byPath.get('h')).toMatchObject({ opaque: true });
  });

  it('directories the tar implies are made, from runs of two records as from one, and listed', async () => {
    const t = await makeTar([
      { name: 'w/a/f', data: 'f' }, // w and w/a implied
      { name: 'w-x', data: 'sorts between w and w/' },
      { name: 'd/', type: 'directory', mode: 0o700 },
      { name: 'd/e/f', data: 'f' }, // d given, d/e implied
      { name: 'r/x', data: 'x' }, // r implied, then replaced: r/x goes with it
      { name: 'r', data: 'r is a file now' },
      { name: 'o/.wh..wh..opq', data: '' }, // an opaque marker implies its directory
      { name: '.wh.g', data: '' }, // deleted below, then implied: opaque, and nothing below to take after
      { name: 'g/h', data: 'h' },
      { name: 'k/.wh.gone', data: '' }, // a whiteout implies its parent too
    ]);
    const one = await convert(once(t), 1e9);
    const two = await convert(once(t), 2);
    expect(two.r.runs).toBeGreaterThan(3);
    expect(two.r.layer).toEqual(one.r.layer);
    expect(two.r.implicitDirs).toBe(one.r.implicitDirs);
    const es = await entriesOf(two.reg, two.r);
    expect(es.map((e) => [e.path, e.type])).toEqual([
      ['d', 'dir'],
      ['d/e', 'dir'],
      ['d/e/f', 'file'],
      ['g', 'dir'],
      ['g/h', 'file'],
      ['k', 'dir'],
      ['k/gone', 'whiteout'],
      ['o', 'dir'],
      ['r', 'file'],
      ['w', 'dir'],
      ['w-x', 'file'],
      ['w/a', 'dir'],
      ['w/a/f', 'file'],
    ]);
    const byPath = new Map(es.map((e) => [e.path, e]));
    expect(byPath.get('d')).toMatchObject({ mode: 0o700 });
    expect(byPath.get('d/e')).toEqual({ type: 'dir', path: 'd/e', mode: 0o755, uid: 0, gid: 0, mtime: '0' });
    expect(byPath.get('o')).toEqual({ type: 'dir', path: 'o', mode: 0o755, uid: 0, gid: 0, mtime: '0', opaque: true });
    expect(byPath.get('g')).toMatchObject({ mode: 0o755, opaque: true });
    // listed: the implied directories whose attributes an image's lower layers give (not g's)
    expect(await implicitList(two.reg, two.r)).toEqual(['d/e', 'k', 'o', 'w', 'w/a']);
  });

  it('a layer with no directory entries implies each directory once, in bounded memory', async () => {
    const gen = { dirs: 40, perDir: 50, dirEntries: false };
    const mem = await convert(manyEntryTar(gen), 1e9);
    const spilled = await convert(manyEntryTar(gen), 64);
    expect(spilled.r.layer).toEqual(mem.r.layer);
    expect(spilled.r.maxEntriesHeld).toBeLessThanOrEqual(64 + 16);
    // 2,005 entry records and one record per implied directory (not one per file): 2,045 in runs of 64
    expect(spilled.r.runs).toBe(Math.ceil(2045 / 64));
    const dirs = (await entriesOf(spilled.reg, spilled.r)).filter((e) => e.type === 'dir');
    expect(dirs).toHaveLength(40);
    // every one of them takes its attributes from below (d3, made opaque, too)
    expect(await implicitList(spilled.reg, spilled.r)).toEqual(dirs.map((d) => d.path));
  });

  it('an entry below what the layer has as a non-directory is refused, as extraction would fail or follow it', async () => {
    const cases: Array<[TarItem[], RegExp]> = [
      [
        [
          { name: 's', type: 'symlink', linkname: '/etc' },
          { name: 's/passwd', data: 'x' },
        ],
        /unsafe path "s": .* has entries below it where it is a symlink/,
      ],
      [
        [
          { name: 'a/', type: 'directory' },
          { name: 'a', data: 'a file now' },
          { name: 'a/y', data: 'y' },
        ],
        /unsafe path "a": .* where it is a file/,
      ],
      [
        [
          { name: 'f', data: 'f' },
          { name: 'f/.wh..wh..opq', data: '' },
        ],
        /opaque marker inside "f", which is not a directory/,
      ],
      [
        [
          { name: 's', type: 'symlink', linkname: '.' },
          { name: 's/.wh.x', data: '' },
        ],
        /unsafe path "s"/,
      ],
    ];
    for (const [items, message] of cases) await expect(convert(once(await makeTar(items)), 2)).rejects.toThrow(message);
  });

  it('a hardlink to a path that was replaced by a directory, or removed with its parent, before it is refused', async () => {
    const bad = await makeTar([
      { name: 'p/', type: 'directory' },
      { name: 'p/f', data: 'f' },
      { name: 'p', data: 'p replaced' },
      { name: 'l', type: 'link', linkname: 'p/f' },
    ]);
    await expect(convert(once(bad), 2)).rejects.toThrow(/not an earlier file/);
    const dir = await makeTar([
      { name: 'd/', type: 'directory' },
      { name: 'l', type: 'link', linkname: 'd' },
    ]);
    await expect(convert(once(dir), 2)).rejects.toThrow(/which is a dir/);
    const later = await makeTar([
      { name: 'l', type: 'link', linkname: 'z' },
      { name: 'z', data: 'z' },
    ]);
    await expect(convert(once(later), 2)).rejects.toThrow(/not an earlier file/);
  });
});
