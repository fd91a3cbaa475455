import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTar, type RawTarEntry, type TarItem, tarOf, writeLayout } from '../../test/helpers/oci-layout.js';
import { compress } from 'zstd-napi';
import { sha256 } from '../cas/digest.js';
import { readManifest } from '../layer/manifest-read.js';
import type { Entry } from '../layer/manifest.js';
import { LocalRegistry } from '../registry/local.js';
import { ensureManifest } from '../store/pull.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { StorePaths } from '../store/paths.js';
import { importImage } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-layer-tars-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
/** An OCI layout of one image whose layers are the given blobs (compressed as given), diff ids of their tars. */
function makeLayout(layers: Array<{ blob: Buffer; tar: Buffer }>): string {
  const dir = join(work, `layout-${n++}`);
  writeLayout(dir, [{ layers }]);
  return dir;
}

async function importLayers(layers: Array<{ blob: Buffer; tar: Buffer }>): Promise<{ reg: LocalRegistry; store: StorePaths; entries: Entry[][] }> {
  const reg = new LocalRegistry(join(work, `reg-${n}`));
  const store = new StorePaths(join(work, `store-${n}`));
  const dir = makeLayout(layers);
  await importImage(reg, store, `oci:${dir}`, { tag: 't/x' });
  const { config } = await resolveEnv(reg, 't/x');
  const entries: Entry[][] = [];
  for (const l of config.layers) {
    const es: Entry[] = [];
    for await (const e of readManifest(await ensureManifest(reg, store, l), 'test')) es.push(e);
    entries.push(es);
  }
  return { reg, store, entries };
}

const plain = (t: Buffer): { blob: Buffer; tar: Buffer } => ({ blob: t, tar: t });

describe('a layer tar becomes a layer by OCI rules', () => {
  it('whiteouts, opaque markers, PAX nanosecond times and xattrs, hardlink groups named by their first path', async () => {
    const t = await makeTar([
      { name: 'd/', type: 'directory' },
      { name: 'd/.wh.gone', data: '' },
      { name: 'o/', type: 'directory' },
      { name: 'o/.wh..wh..opq', data: '' },
      { name: 'o/new', data: 'n' },
      { name: 'z-first', data: 'shared', pax: { mtime: '1700000000.123456789', 'SCHILY.xattr.user.k': 'v' } },
      { name: 'a-link', type: 'link', linkname: 'z-first' },
      { name: './x/', type: 'directory' },
      { name: 'x/s', type: 'symlink', linkname: '../z-first' },
    ]);
    const { entries } = await importLayers([plain(t)]);
    const byPath = new Map(entries[0]!.map((e) => [e.path, e]));
    expect(byPath.get('d/gone')).toEqual({ type: 'whiteout', path: 'd/gone' });
    expect(byPath.get('o')).toMatchObject({ type: 'dir', opaque: true });
    expect(byPath.has('o/.wh..wh..opq')).toBe(false);
    // the byte-wise first name of a group is its file entry, whatever the tar's order
    expect(byPath.get('a-link')).toMatchObject({ type: 'file', mtime: '1700000000123456789', xattrs: { 'user.k': Buffer.from('v').toString('base64') } });
    expect(byPath.get('z-first')).toEqual({ type: 'hardlink', path: 'z-first', target: 'a-link' });
    expect(byPath.get('x/s')).toMatchObject({ type: 'symlink', target: '../z-first' });
    expect(entries[0]!.map((e) => e.path)).toEqual([...entries[0]!.map((e) => e.path)].sort());
  });

  it('a directory a layer implies takes the attributes the layers below show there, or a runtime’s', async () => {
    const d = (name: string, mode: number, uid = 0): RawTarEntry => ({ name, type: 'directory', mode, uid, gid: uid, mtime: new Date(1000 * uid) });
    const f = (name: string): RawTarEntry => ({ name, type: 'file', data: name });
    const layers = [
      [
        d('a/', 0o700, 1),
        d('b/', 0o711, 2),
        d('c/', 0o750, 3),
        d('c/d/', 0o701, 4),
        { name: 'e', type: 'symlink' as const, linkname: 'a' },
        d('f/', 0o710, 5),
        d('f/g/', 0o720, 6),
      ],
      // a again, nearer; b deleted; c made opaque (c/d hidden), itself implied
      [d('a/', 0o705, 7), f('.wh.b'), f('c/.wh..wh..opq'), f('c/x')],
      // every parent implied; f made opaque here (f/g below it is not this image's)
      [f('a/1'), f('b/1'), f('c/d/1'), f('e/1'), f('f/.wh..wh..opq'), f('f/g/1'), f('n/1')],
    ];
    const tars = await Promise.all(layers.map((l) => tarOf(l)));
    const { entries } = await importLayers(tars.map(plain));
    const attrs = (path: string): unknown => {
      const e = entries[2]!.find((x) => x.path === path);
      return e?.type === 'dir' ? [e.mode.toString(8), e.uid, e.mtime, e.opaque === true] : e;
    };
    expect(attrs('a')).toEqual(['705', 7, '7000000000', false]); // the nearest layer's
    expect(attrs('b')).toEqual(['755', 0, '0', false]); // deleted between: a runtime's
    expect(attrs('c')).toEqual(['750', 3, '3000000000', false]); // the middle layer's, which took the lowest one's
    expect(attrs('c/d')).toEqual(['755', 0, '0', false]); // hidden by the opaque c between
    expect(attrs('e')).toEqual(['755', 0, '0', false]); // a symlink below: replaced, as containerd does
    expect(attrs('f')).toEqual(['710', 5, '5000000000', true]);
    expect(attrs('f/g')).toEqual(['755', 0, '0', false]); // below this layer's own opaque f
    expect(attrs('n')).toEqual(['755', 0, '0', false]); // nowhere below
    // the middle layer keeps its own a, and its implied c took the lowest layer's
    expect(entries[1]!.find((x) => x.path === 'c')).toMatchObject({ mode: 0o750, uid: 3, opaque: true });
  });

  it('gzip, zstd and plain blobs of one tar give the same layer', async () => {
    const t = await makeTar([
      { name: 'f', data: 'x'.repeat(10000) },
      { name: 'g/', type: 'directory' },
    ]);
    const digests = [];
    for (const blob of [t, gzipSync(t), compress(t)]) {
      const { entries } = await importLayers([{ blob, tar: t }]);
      digests.push(sha256(JSON.stringify(entries)));
    }
    expect(new Set(digests).size).toBe(1);
  });
});

describe('hostile or broken layers are refused and nothing is tagged', () => {
  const cases: Array<[string, TarItem[], RegExp]> = [
    ['a ../ path', [{ name: 'a/../../etc/passwd', data: 'x' }], /`\.\.` component/],
    ['an absolute path', [{ name: '/etc/passwd', data: 'x' }], /absolute/],
    ['a hardlink to a file outside the layer', [{ name: 'l', type: 'link', linkname: '../../etc/shadow' }], /`\.\.` component|not an earlier file/],
    ['a hardlink to a path the layer lacks', [{ name: 'l', type: 'link', linkname: 'etc/shadow' }], /not an earlier file/],
  ];
  for (const [what, items, message] of cases) {
    it(what, async () => {
      const t = await makeTar(items);
      const reg = new LocalRegistry(join(work, `bad-${n}`));
      const dir = makeLayout([plain(t)]);
      await expect(importImage(reg, new StorePaths(join(work, `bad-store-${n}`)), `oci:${dir}`, { tag: 't/bad' })).rejects.toThrow(message);
      const refs = [];
      for await (const r of reg.listRefs()) refs.push(r.name);
      expect(refs).toEqual([]);
    });
  }

  it('a blob whose bytes do not match its digest', async () => {
    const t = await makeTar([{ name: 'f', data: 'good' }]);
    const dir = makeLayout([plain(t)]);
    // same length, one byte changed: only the digest can tell
    const bad = Buffer.from(t);
    bad[600] = bad[600]! ^ 1;
    writeFileSync(join(dir, 'blobs', 'sha256', sha256(t).slice(7)), bad);
    const reg = new LocalRegistry(join(work, `bad-digest-${n}`));
    await expect(importImage(reg, new StorePaths(join(work, `bad-digest-store-${n}`)), `oci:${dir}`, { tag: 't/bad' })).rejects.toMatchObject({
      code: 'DIGEST_MISMATCH',
    });
    expect(await reg.getRef('t/bad')).toBeNull();
  });

  it('a manifest list without the platform names the platforms it has', async () => {
    const t = await makeTar([{ name: 'f', data: 'x' }]);
    const dir = makeLayout([plain(t)]);
    const idx = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as { manifests: Array<Record<string, unknown>> };
    idx.manifests[0]!['platform'] = { os: 'linux', architecture: 'arm64' };
    const inner = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests: idx.manifests }));
    writeFileSync(join(dir, 'blobs', 'sha256', sha256(inner).slice(7)), inner);
    writeFileSync(
      join(dir, 'index.json'),
      JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.index.v1+json', digest: sha256(inner), size: inner.length }] }),
    );
    const reg = new LocalRegistry(join(work, `plat-${n}`));
    const store = new StorePaths(join(work, `plat-store-${n}`));
    await expect(importImage(reg, store, `oci:${dir}`, { tag: 't/p' })).rejects.toThrow(/no image for platform linux\/amd64 \(it has: linux\/arm64\)/);
    expect(await reg.getRef('t/p')).toBeNull();
    await expect(importImage(reg, store, `oci:${dir}`, { tag: 't/p', platform: 'linux/arm64' })).resolves.toMatchObject({ status: 'imported' });
  });
});
