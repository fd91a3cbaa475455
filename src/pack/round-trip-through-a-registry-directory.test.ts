import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestHex } from '../cas/digest.js';
import { LocalRegistry } from '../registry/local.js';
import { publishPacks } from './publish.js';
import { fetchObjects, parsePackIndex, type PackIndexEntry } from './reader.js';
import { prng, randomBytesSeeded, sourceText, writeObject } from '../../test/helpers/pack-objects.js';
import { PackWriter, type PackSource, type WrittenPack } from './writer.js';

let work: string;
let sources: PackSource[];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pack-rt-'));
  await mkdir(join(work, 'src'));
  const rand = prng(1);
  sources = [];
  for (let i = 0; i < 400; i++) sources.push(await writeObject(join(work, 'src'), `t${i}`, sourceText(Math.floor(rand() * 20000), rand)));
  for (let i = 0; i < 10; i++) sources.push(await writeObject(join(work, 'src'), `b${i}`, randomBytesSeeded(Math.floor(rand() * 300000), rand)));
  sources.push(await writeObject(join(work, 'src'), 'empty', Buffer.alloc(0)));
  sources.push(await writeObject(join(work, 'src'), 'large', sourceText(3 << 20, rand))); // above the frame target below
  sources.push(await writeObject(join(work, 'src'), 'exact', sourceText(512, rand)));
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

async function writePacks(dir: string, list: PackSource[]): Promise<WrittenPack[]> {
  await mkdir(dir, { recursive: true });
  // Small frame and pack targets so this small tree still spans several frames and packs.
  const w = new PackWriter({ tempDir: dir, frameBytes: 256 << 10, targetPackBytes: 1 << 20 });
  for (const s of list) await w.add(s);
  return w.finish();
}

describe('pack round trip', () => {
  it('writes, publishes, indexes and fetches back every object byte for byte', async () => {
    const packs = await writePacks(join(work, 'out1'), sources);
    expect(packs.length).toBeGreaterThan(1);
    expect(packs.reduce((n, p) => n + p.objects, 0)).toBe(sources.length);

    const registry = new LocalRegistry(join(work, 'registry'));
    await publishPacks(registry, packs);
    const dest = join(work, 'dest');
    await mkdir(dest);
    let progressed = 0;
    for await (const { pack, index } of registry.listPacks()) {
      const idx = parsePackIndex(await registry.getBlob(index), index);
      expect(idx.pack).toBe(pack);
      await fetchObjects(registry, pack, idx.entries, dest, { onProgress: (p) => (progressed = Math.max(progressed, p.objects)) });
    }
    for (const s of sources) {
      // Buffer.equals: vitest's deep equality walks buffers element by element (minutes for MBs).
      const same = (await readFile(join(dest, digestHex(s.digest)))).equals(await readFile(s.path));
      expect(same, `object ${s.path}`).toBe(true);
    }
    expect((await readdir(dest)).filter((n) => n.startsWith('.tmp'))).toEqual([]);
    expect(progressed).toBeGreaterThan(0);
  });

  it('fetches an empty object without reading the pack, and racing fetchers of the same objects both succeed', async () => {
    const registry = new LocalRegistry(join(work, 'registry-race'));
    const packs = await writePacks(join(work, 'out-race'), sources.slice(0, 60).concat(sources.filter((s) => s.size === 0)));
    await publishPacks(registry, packs);
    const entries = packs.flatMap((p) => parsePackIndex(p.indexBytes, p.index).entries);
    const dest = join(work, 'dest-race');
    await mkdir(dest);
    const empty = entries.filter((e) => e.size === 0);
    expect(empty).toHaveLength(1);
    const r = await fetchObjects(registry, packs.find((p) => parsePackIndex(p.indexBytes, p.index).entries.some((e) => e.size === 0))!.pack, empty, dest);
    expect(r).toMatchObject({ objects: 1, bytes: 0, fetchedBytes: 0, reads: 0 });
    expect((await readFile(join(dest, digestHex(empty[0]!.digest)))).length).toBe(0);

    const byPack = packs.map((p) => ({ pack: p.pack, entries: parsePackIndex(p.indexBytes, p.index).entries }));
    const fetchAll = () => Promise.all(byPack.map((p) => fetchObjects(registry, p.pack, p.entries, dest)));
    await Promise.all([fetchAll(), fetchAll(), fetchAll()]);
    for (const e of entries) expect((await readFile(join(dest, digestHex(e.digest)))).length).toBe(e.size);
    expect((await readdir(dest)).filter((n) => n.startsWith('.tmp'))).toEqual([]);
  });

  it('is deterministic: the same objects in the same order give the same pack and index digests', async () => {
    const a = await writePacks(join(work, 'det-a'), sources.slice(0, 120));
    const b = await writePacks(join(work, 'det-b'), sources.slice(0, 120));
    expect(b.map((p) => [p.pack, p.index])).toEqual(a.map((p) => [p.pack, p.index]));
  });

  it('is a plain zstd-compressed tar: zstd -dc | tar -t lists objects/<hex> for each object', async () => {
    const packs = await writePacks(join(work, 'tar'), sources);
    const listed: string[] = [];
    for (const p of packs) {
      const out = execFileSync('sh', ['-c', `zstd -dc '${p.packPath}' | tar -t`]).toString();
      listed.push(...out.trim().split('\n'));
    }
    expect(listed.sort()).toEqual(sources.map((s) => `objects/${digestHex(s.digest)}`).sort());
  });

  it('stores a digest added twice once, and writes no pack for no objects', async () => {
    const dir = join(work, 'dup');
    await mkdir(dir);
    const w = new PackWriter({ tempDir: dir });
    await w.add(sources[0]!);
    await w.add(sources[0]!);
    const [p] = await w.finish();
    expect(p!.objects).toBe(1);
    const idx = parsePackIndex(p!.indexBytes, p!.index);
    expect(idx.entries.map((e: PackIndexEntry) => e.digest)).toEqual([sources[0]!.digest]);
    expect(await new PackWriter({ tempDir: dir }).finish()).toEqual([]);
  });

  it('fails clearly when a source file changed size since capture, leaving no temp pack', async () => {
    const dir = join(work, 'changed');
    await mkdir(dir);
    const w = new PackWriter({ tempDir: dir });
    const s = sources[5]!;
    await expect(
      (async () => {
        await w.add({ ...s, size: s.size + 1 });
        await w.finish();
      })(),
    ).rejects.toThrow(/changed while being packed/);
    expect(await readdir(dir)).toEqual([]);
  });
});
