import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { manyEntryTar } from '../../test/helpers/many-entry-tar.js';
import { makeTar } from '../../test/helpers/oci-layout.js';
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
