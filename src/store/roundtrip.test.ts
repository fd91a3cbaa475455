import { lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { asRemote } from '../../test/helpers/remote-registry.js';
import { snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { makeEdgeCaseTree, makeRandomTree } from '../../test/helpers/trees.js';
import { LocalRegistry } from '../registry/local.js';
import { exportEnv } from './export.js';
import { StorePaths } from './paths.js';
import { type PullOptions, pullEnv } from './pull.js';
import { pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';

const work = mkdtempSync(join(tmpdir(), 'ms-roundtrip-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Exported with every special bit and node kept (root's --preserve-special), so the tree is the source's. */
async function roundTrip(src: string, name: string, preserveSpecial = true): Promise<string> {
  const reg = new LocalRegistry(join(work, name, 'registry'));
  const pushStore = new StorePaths(join(work, name, 'store-push'));
  await pushTree(reg, pushStore, src, { tag: `rt/${name}` });
  // An empty store on "another node": everything must come from the registry.
  const out = join(work, name, 'out');
  await exportEnv(reg, new StorePaths(join(work, name, 'store-pull')), `rt/${name}`, out, { preserveSpecial });
  return out;
}

/**
 * How a pull may decode: in the helper from local pack files (which also lays out plain manifests
 * itself), the same with node laying out, in the helper from its records, in node.
 */
const DECODERS: Array<[string, PullOptions, boolean]> = [
  ['the helper reading pack files', {}, false],
  ['the helper reading pack files and node laying out', { layOutIn: 'node' }, false],
  ['the helper given frames in records', {}, true],
  ['node', { decodeIn: 'node' }, false],
];

function slug(s: string): string {
  return s.replaceAll(' ', '-');
}

/** Pushes `src`, pulls it into an empty store, checks the laid-out layer equals it (xattrs aside); returns the layer's snapshot. */
async function pulledLayerMatches(src: string, name: string, opts: PullOptions = {}, remote = false): Promise<ReturnType<typeof snapshotTree>> {
  const local = new LocalRegistry(join(work, name, 'registry'));
  await pushTree(local, new StorePaths(join(work, name, 'store-push')), src, { tag: `rt/${name}` });
  const reg = remote ? asRemote(local) : local;
  const { layerDirs } = await pullEnv(reg, new StorePaths(join(work, name, `store-pull-${Math.random().toString(36).slice(2)}`)), `rt/${name}`, opts);
  const got = snapshotTree(layerDirs[0]!, { xattrs: false });
  const want = snapshotTree(src, { xattrs: false });
  delete got['.'];
  delete want['.'];
  expect(got).toEqual(want);
  return got;
}

describe('capture -> push -> pull into an empty store -> export reproduces the tree', () => {
  it('on hand-made edge cases: types, modes, owners, ns mtimes, links, xattrs, odd names', async () => {
    const src = join(work, 'edge-src');
    makeEdgeCaseTree(src);
    const out = await roundTrip(src, 'edge');
    const a = snapshotTree(src);
    const b = snapshotTree(out);
    expect(Object.keys(b).sort()).toEqual(Object.keys(a).sort());
    expect(b).toEqual(a);
    // kept special files: the export's top directory is private
    expect(lstatSync(out).mode & 0o777).toBe(0o700);
    // the fixture really contains what the test claims to cover
    expect(a['cap-bin']?.xattrs?.['security.capability']).toBeDefined();
    expect(a['hl-2']?.links).toEqual(['hl-1', 'hl-2', 'sub/hl-3']);
    expect(a['null-dev']?.type).toBe('char');
    expect(a['small.txt']?.mtimeNs).toBe('1600000000123456789');
  });

  it('a plain export is the same tree without setuid bits, file capabilities or device nodes', async () => {
    const src = join(work, 'edge-src-plain');
    makeEdgeCaseTree(src);
    const a = snapshotTree(src);
    const b = snapshotTree(await roundTrip(src, 'edge-plain', false));
    expect(a['setuid-bin']?.mode).toBe('4755');
    expect(b['setuid-bin']?.mode).toBe('755');
    expect(b['cap-bin']?.xattrs?.['security.capability']).toBeUndefined();
    expect(b['null-dev']).toBeUndefined();
    expect(Object.keys(b).sort()).toEqual(
      Object.keys(a)
        .filter((k) => a[k]?.type !== 'char' && a[k]?.type !== 'block')
        .sort(),
    );
  });

  it.each([1, 2, 3])('on a random tree (seed %i)', async (seed) => {
    const src = join(work, `rand-src-${seed}`);
    makeRandomTree(src, seed);
    const out = await roundTrip(src, `rand${seed}`);
    expect(snapshotTree(out, { xattrs: false })).toEqual(snapshotTree(src, { xattrs: false }));
  });
});

describe('layers stack and deduplicate in the registry', () => {
  it('a second layer with mostly the same files adds only the new contents', async () => {
    const reg = new LocalRegistry(join(work, 'dedup', 'registry'));
    const store = new StorePaths(join(work, 'dedup', 'store'));
    const a = join(work, 'dedup-a');
    makeRandomTree(a, 42, 200);
    const first = await pushTree(reg, store, a, { tag: 'd/a' });
    const second = await pushTree(reg, store, a, { tag: 'd/a-again' });
    expect(first.newObjects).toBeGreaterThan(0);
    expect(second.newObjects).toBe(0);
    expect(second.reusedObjects).toBe(first.newObjects);
    expect(second.layer.digest).toBe(first.layer.digest);

    const parent = await resolveEnv(reg, 'd/a');
    const stacked = await pushTree(reg, store, join(work, 'edge-src'), { tag: 'd/stacked', parent, config: { workdir: '/testbed' } });
    const env = await resolveEnv(reg, 'd/stacked');
    expect(env.config.layers.map((l) => l.digest)).toEqual([first.layer.digest, stacked.layer.digest]);
    expect(env.config.config.workdir).toBe('/testbed');
  });

  it('pulling twice lays each layer out once and the second pull fetches nothing', async () => {
    const reg = new LocalRegistry(join(work, 'dedup', 'registry'));
    const store = new StorePaths(join(work, 'dedup', 'store-node'));
    const p1 = await pullEnv(reg, store, 'd/stacked');
    expect(p1.fetchedObjects).toBeGreaterThan(0);
    const p2 = await pullEnv(reg, store, 'd/stacked');
    expect(p2.fetchedObjects).toBe(0);
    expect(p2.layerDirs).toEqual(p1.layerDirs);
  });

  it.each(
    DECODERS.flatMap(
      ([decoder, opts, remote]): Array<[string, string, PullOptions, boolean]> => [
        ['in memory', decoder, opts, remote],
        ['on disk', decoder, { ...opts, heldBytes: 0 }, remote],
      ],
    ),
  )('the pulled layer itself reproduces the tree, xattrs included, when fetched objects wait %s, decoded by %s', async (_how, _decoder, opts, remote) => {
    const local = new LocalRegistry(join(work, 'edge', 'registry'));
    const reg = remote ? asRemote(local) : local;
    const store = new StorePaths(join(work, 'edge', `store-held-${Math.random().toString(36).slice(2)}`));
    const { layerDirs } = await pullEnv(reg, store, 'rt/edge', opts);
    const got = snapshotTree(layerDirs[0]!);
    const want = snapshotTree(join(work, 'edge-src'));
    // the root directory is the layer's own (owner root, 0755), not the captured one's
    delete got['.'];
    delete want['.'];
    expect(got).toEqual(want);
    expect(got['cap-bin']?.xattrs?.['security.capability']).toBeDefined();
  });

  it.each(DECODERS)('a large object (a frame of its own, decoded as a stream) is laid out whole, decoded by %s', async (decoder, opts, remote) => {
    const src = join(work, `large-src-${slug(decoder)}`);
    mkdirSync(src, { recursive: true });
    // over the 32 MiB a frame may have to be decoded whole, and varied enough to be checked
    const big = Buffer.alloc(40 << 20);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i, i);
    writeFileSync(join(src, 'big.bin'), big);
    writeFileSync(join(src, 'small.txt'), 'next to it\n');
    const got = await pulledLayerMatches(src, `large-${slug(decoder)}`, opts, remote);
    expect(got['big.bin']?.size).toBe(40 << 20);
  });

  it('an object too large to read whole from a remote registry (it does not compress) is spooled to a file, compressed, and laid out whole', async () => {
    const src = join(work, 'spooled-src');
    mkdirSync(src, { recursive: true });
    const big = Buffer.alloc(20 << 20);
    for (let i = 0; i < big.length; i += 4) big.writeUInt32LE((i * 2654435761) >>> 0, i);
    writeFileSync(join(src, 'big.bin'), big);
    writeFileSync(join(src, 'small.txt'), 'next to it\n');
    const got = await pulledLayerMatches(src, 'spooled', {}, true);
    expect(got['big.bin']?.size).toBe(20 << 20);
  });

  it.each(DECODERS)('objects of a few MiB held in memory span the helper record pieces and land whole, decoded by %s', async (decoder, opts, remote) => {
    const src = join(work, `mid-src-${slug(decoder)}`);
    mkdirSync(src, { recursive: true });
    // several objects larger than one 512 KiB record piece and than a quarter slab, up to a
    // whole 4 MiB slab, with small ones between: each must be copied across pieces exactly
    const sizes = [(3 << 20) / 2, 3 << 20, (4 << 20) - 1, 700 << 10, 5000, (5 << 20) / 2, 3 << 20];
    sizes.forEach((size, k) => {
      const data = Buffer.alloc(size);
      for (let i = 0; i + 4 <= size; i += 4) data.writeUInt32LE((i * 2654435761 + k) >>> 0, i);
      writeFileSync(join(src, `f${k}.bin`), data);
    });
    const got = await pulledLayerMatches(src, `mid-${slug(decoder)}`, opts, remote);
    expect(got['f2.bin']?.size).toBe((4 << 20) - 1);
  });

  it('lays a layer out with owners shifted by an id base', async () => {
    const reg = new LocalRegistry(join(work, 'edge', 'registry'));
    const store = new StorePaths(join(work, 'edge', 'store-shift'));
    const base = 1_000_000;
    const { layerDirs } = await pullEnv(reg, store, 'rt/edge', { idShift: base });
    const src = snapshotTree(join(work, 'edge-src'), { xattrs: false });
    const shifted = snapshotTree(layerDirs[0]!, { xattrs: false, idShift: base });
    expect(shifted['private/secret']?.uid).toBe(1234);
    expect(shifted['private/secret']?.gid).toBe(5678);
    expect(shifted['small.txt']?.uid).toBe(src['small.txt']?.uid);
  });
});
