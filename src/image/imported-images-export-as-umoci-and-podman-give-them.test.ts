import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  copyToOciLayout,
  makeTestImages,
  podmanExport,
  pushImage,
  removeWorkDir,
  type RunningRegistry,
  saveImage,
  startRegistry,
  type TestImages,
  umociUnpack,
} from '../../test/helpers/images.js';
import { snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { EnvConfigSchema } from '../layer/env.js';
import { readJsonBlob } from '../registry/blobs.js';
import { LocalRegistry } from '../registry/local.js';
import { exportEnv } from '../store/export.js';
import { StorePaths } from '../store/paths.js';
import { importImage } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-image-'));
let img: TestImages;
let registry: RunningRegistry;
const expected: Record<string, ReturnType<typeof snapshotTree>> = {};
const podmanTrees: Record<string, ReturnType<typeof snapshotTree>> = {};

beforeAll(async () => {
  img = makeTestImages(join(work, 'images'));
  registry = await startRegistry(join(work, 'docker-registry'));
  for (const n of ['app1', 'app2'] as const) {
    copyToOciLayout(img, img[n], join(work, 'layout'), n);
    expected[n] = snapshotTree(umociUnpack(join(work, 'layout'), n, join(work, `bundle-${n}`)));
    // podman's own view of the image agrees with umoci's: either is the reference
    podmanTrees[n] = snapshotTree(podmanExport(img, img[n], join(work, `podman-${n}`)));
    saveImage(img, img[n], 'oci-archive', join(work, `${n}.oci.tar`));
    saveImage(img, img[n], 'docker-archive', join(work, `${n}.docker.tar`));
    pushImage(img, img[n], `docker://${registry.host}/mstest/${n}:1`);
  }
}, 300_000);

afterAll(async () => {
  await registry?.stop();
  removeWorkDir(work);
});

const sources = (n: 'app1' | 'app2'): Array<[string, string]> => [
  ['a registry', `docker://${registry.host}/mstest/${n}:1`],
  ['an OCI layout', `oci:${join(work, 'layout')}:${n}`],
  ['an oci-archive', `oci-archive:${join(work, `${n}.oci.tar`)}`],
  ['a docker-archive', `docker-archive:${join(work, `${n}.docker.tar`)}`],
];

describe('an imported image exports the tree umoci unpacks and podman exports from it', () => {
  it('(the reference trees hold what the images were made with)', () => {
    const t = expected['app1']!;
    expect(t['data/gone.txt']).toBeUndefined();
    expect(t['opq/old.txt']).toBeUndefined();
    expect(t['opq/new.txt']).toMatchObject({ type: 'file' });
    expect(t['data/keep/k.txt']).toMatchObject({ type: 'file' });
    expect(t['data/a']!.links).toEqual(['data/a', 'data/b']);
    expect(t['data/su']).toMatchObject({ mode: '4755', xattrs: { 'security.capability': expect.stringMatching(/^0x01/) } });
    expect(t['data/null']).toMatchObject({ type: 'char', rdev: String((1 << 8) | 3) });
    expect(t['data/fifo']).toMatchObject({ type: 'fifo' });
    expect(expected['app2']!['data/big.bin']).toMatchObject({ size: 5 << 20 });
  });

  for (const kind of ['a registry', 'an OCI layout', 'an oci-archive', 'a docker-archive']) {
    it(`from ${kind}: deletions, opaque dir, hardlinks, setuid, xattr, fifo, device, a file larger than a frame`, async () => {
      const dir = join(work, kind.replaceAll(' ', '-'));
      const reg = new LocalRegistry(join(dir, 'registry'));
      const store = new StorePaths(join(dir, 'store'));
      for (const n of ['app1', 'app2'] as const) {
        const src = sources(n).find(([k]) => k === kind)![1];
        const r = await importImage(reg, store, src, { tag: `img/${n}`, tlsVerify: false });
        expect(r.status).toBe('imported');
        const out = join(dir, `out-${n}`);
        // the library export keeps setuid bits (see the report: the CLI may strip them)
        await exportEnv(reg, store, `img/${n}`, out, { preserveSpecial: true });
        const tree = snapshotTree(out);
        expect(tree).toEqual(expected[n]);
        expect(tree).toEqual(podmanTrees[n]);
      }
      const app1 = await readJsonBlob(reg, (await reg.getRef('img/app1'))!, EnvConfigSchema, 'env');
      expect(app1.config).toMatchObject({
        workdir: '/data',
        user: { uid: 1000, gid: 1001 },
        entrypoint: ['/bin/sh', '-c'],
        cmd: ['echo', 'hi'],
        labels: { 'org.test': 'yes' },
      });
      expect(app1.config.env).toMatchObject({ FOO: 'bar', PATH: '/bin' });
      expect(app1.image?.layers).toHaveLength(2);
    }, 120_000);
  }
});

describe('images sharing a base', () => {
  it('convert the base once: the second image fetches and converts only its own layer', async () => {
    const dir = join(work, 'shared');
    const reg = new LocalRegistry(join(dir, 'registry'));
    const store = new StorePaths(join(dir, 'store'));
    const first = await importImage(reg, store, `docker://${registry.host}/mstest/app1:1`, { tlsVerify: false });
    expect(first.layers.map((l) => l.converted)).toEqual([true, true]);
    const second = await importImage(reg, store, `docker://${registry.host}/mstest/app2:1`, { tlsVerify: false });
    expect(second.layers.map((l) => l.converted)).toEqual([false, true]);
    expect(second.layers[0]!.layer).toBe(first.layers[0]!.layer);
    // only the new layer's blob was read
    expect(second.fetchedBytes).toBe(second.layers[1]!.compressedSize);
  }, 120_000);

  it('an image imported before is not fetched again, from whatever source', async () => {
    const dir = join(work, 'again');
    const reg = new LocalRegistry(join(dir, 'registry'));
    const store = new StorePaths(join(dir, 'store'));
    const a = await importImage(reg, store, `oci-archive:${join(work, 'app1.oci.tar')}`, {});
    const b = await importImage(reg, store, `docker://${registry.host}/mstest/app1:1`, { tlsVerify: false, tag: 'again/app1' });
    expect(b.status).toBe('present');
    expect(b.fetchedBytes).toBe(0);
    expect(b.env).toBe(a.env);
    expect(await reg.getRef('again/app1')).toBe(a.env);
  }, 120_000);
});
