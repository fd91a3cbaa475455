import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  makeTestImages,
  pushImage,
  pushManifestList,
  removeWorkDir,
  type RunningRegistry,
  startRegistry,
  startTokenFront,
  type TestImages,
  type TokenFront,
} from '../../test/helpers/images.js';
import { LocalRegistry } from '../registry/local.js';
import type { Registry } from '../registry/registry.js';
import { StorePaths } from '../store/paths.js';
import { importImage, openImageSource } from './import.js';
import { parsePlatform } from './oci-schema.js';

const work = mkdtempSync(join(tmpdir(), 'ms-image-auth-'));
const user = { user: 'alice', password: 's3cret' };
let img: TestImages;
let open: RunningRegistry;
let basic: RunningRegistry;
let front: TokenFront;
let n = 0;

beforeAll(async () => {
  img = makeTestImages(join(work, 'images'));
  open = await startRegistry(join(work, 'open'));
  basic = await startRegistry(join(work, 'basic'), user);
  for (const name of ['app1', 'app2'] as const) {
    pushImage(img, img[name], `docker://${open.host}/mstest/${name}:1`);
    pushImage(img, img[name], `docker://${basic.host}/mstest/${name}:1`, `${user.user}:${user.password}`);
  }
  front = await startTokenFront(open.host, user);
}, 300_000);

afterAll(async () => {
  await front?.stop();
  await open?.stop();
  await basic?.stop();
  removeWorkDir(work);
});

function fresh(): { reg: Registry; store: StorePaths } {
  n++;
  return { reg: new LocalRegistry(join(work, `reg-${n}`)), store: new StorePaths(join(work, `store-${n}`)) };
}

function authFile(host: string): string {
  const f = join(work, `auth-${n}.json`);
  writeFileSync(f, JSON.stringify({ auths: { [host]: { auth: Buffer.from(`${user.user}:${user.password}`).toString('base64') } } }));
  return f;
}

async function refNames(reg: Registry): Promise<string[]> {
  const out = [];
  for await (const r of reg.listRefs()) out.push(r.name);
  return out.sort();
}

describe('registry auth', () => {
  it('htpasswd: a 401 without credentials says to log in and tags nothing; credentials from an auth file import', async () => {
    const { reg, store } = fresh();
    const src = `docker://${basic.host}/mstest/app1:1`;
    await expect(importImage(reg, store, src, { tlsVerify: false, tag: 'a/app1', authFile: join(work, 'none.json') })).rejects.toMatchObject({
      code: 'AUTH_REQUIRED',
      hint: expect.stringMatching(/login/),
    });
    expect(await refNames(reg)).toEqual([]);
    await expect(importImage(reg, store, src, { tlsVerify: false, tag: 'a/app1', authFile: authFile(basic.host) })).resolves.toMatchObject({
      status: 'imported',
    });
  }, 120_000);

  it('bearer token: the realm/service/scope challenge is answered with credentials from $REGISTRY_AUTH_FILE', async () => {
    const { reg, store } = fresh();
    const src = `docker://${front.host}/mstest/app1:1`;
    await expect(importImage(reg, store, src, { tlsVerify: false, authFile: join(work, 'none.json') })).rejects.toMatchObject({ code: 'AUTH_REQUIRED' });
    process.env['REGISTRY_AUTH_FILE'] = authFile(front.host);
    try {
      front.log.length = 0;
      await expect(importImage(reg, store, src, { tlsVerify: false, tag: 'b/app1' })).resolves.toMatchObject({ status: 'imported' });
      expect(front.log).toContain('GET /token');
    } finally {
      delete process.env['REGISTRY_AUTH_FILE'];
    }
  }, 120_000);
});

describe('manifest formats and compressions', () => {
  it('Docker schema 2 with gzip and OCI with zstd layers give the layers the OCI gzip image gives', async () => {
    pushImage(img, img.app1, `docker://${open.host}/mstest/app1:v2s2`, undefined, ['--format', 'v2s2']);
    // a registry of its own: skopeo would otherwise reuse the gzip blobs it knows are there
    const zreg = await startRegistry(join(work, 'zstd'));
    try {
      pushImage(img, img.app1, `docker://${zreg.host}/mstest/app1:zstd`, undefined, ['--format', 'oci', '--dest-compress-format', 'zstd']);
      const layersOf = async (host: string, tag: string): Promise<string[]> => {
        const { reg, store } = fresh();
        const r = await importImage(reg, store, `docker://${host}/mstest/app1:${tag}`, { tlsVerify: false });
        return r.layers.map((l) => l.layer);
      };
      const oci = await layersOf(open.host, '1');
      expect(await layersOf(open.host, 'v2s2')).toEqual(oci);
      expect(await layersOf(zreg.host, 'zstd')).toEqual(oci);
      const m = await fetch(`http://${zreg.host}/v2/mstest/app1/manifests/zstd`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } }).then(
        (x) => x.json() as Promise<{ layers: Array<{ mediaType: string }> }>,
      );
      expect(m.layers.map((l) => l.mediaType)).toContain('application/vnd.oci.image.layer.v1.tar+zstd');
      const v2 = await fetch(`http://${open.host}/v2/mstest/app1/manifests/v2s2`, {
        headers: { accept: 'application/vnd.docker.distribution.manifest.v2+json' },
      });
      expect(v2.headers.get('content-type')).toBe('application/vnd.docker.distribution.manifest.v2+json');
    } finally {
      await zreg.stop();
    }
  }, 120_000);
});

describe('manifest lists', () => {
  it('a list without the platform asked for names the platforms it has; --platform picks one', async () => {
    const { reg, store } = fresh();
    await pushManifestList(img, img.app1, open.host, 'mstest/list', '1', { os: 'linux', architecture: 'arm64' });
    const src = `docker://${open.host}/mstest/list:1`;
    await expect(importImage(reg, store, src, { tlsVerify: false, tag: 'l/x' })).rejects.toThrow(/no image for platform linux\/amd64 \(it has: linux\/arm64\)/);
    expect(await refNames(reg)).toEqual([]);
    await expect(importImage(reg, store, src, { tlsVerify: false, tag: 'l/x', platform: 'linux/arm64' })).resolves.toMatchObject({ status: 'imported' });
  }, 120_000);
});

describe('registry faults', () => {
  const opts = (): { tlsVerify: false; authFile: string; attempts: number; retryDelayMs: number } => ({
    tlsVerify: false,
    authFile: authFile(front.host),
    attempts: 3,
    retryDelayMs: 5,
  });

  async function topLayer(name: string): Promise<{ digest: string; size: number }> {
    const r = await openImageSource(`docker://${front.host}/mstest/${name}:1`, opts()).resolve(parsePlatform('linux/amd64'));
    const l = r.layers[r.layers.length - 1]!;
    return { digest: l.digest!, size: l.size! };
  }

  it('a blob that does not match its digest fails the import, tags nothing, and a rerun converts only what is left', async () => {
    const { reg, store } = fresh();
    const top = await topLayer('app1');
    front.faults.flip = new Set([top.digest]);
    try {
      await expect(importImage(reg, store, `docker://${front.host}/mstest/app1:1`, { ...opts(), tag: 'c/app1', jobs: 1 })).rejects.toMatchObject({
        code: 'DIGEST_MISMATCH',
      });
    } finally {
      front.faults.flip = undefined;
    }
    expect((await refNames(reg)).filter((r) => !r.startsWith('_image/diffid/'))).toEqual([]);
    const again = await importImage(reg, store, `docker://${front.host}/mstest/app1:1`, { ...opts(), tag: 'c/app1' });
    // the base layer was converted and recorded before the bad blob: the rerun resumes after it
    expect(again.layers.map((l) => l.converted)).toEqual([false, true]);
    expect(await reg.getRef('c/app1')).toBe(again.env);
  }, 120_000);

  it('a connection cut mid-blob is resumed from the byte reached', async () => {
    const { reg, store } = fresh();
    const top = await topLayer('app2');
    front.faults.cutAfter = new Map([[top.digest, { after: Math.floor(top.size / 2), times: 2 }]]);
    front.log.length = 0;
    try {
      await expect(importImage(reg, store, `docker://${front.host}/mstest/app2:1`, { ...opts(), tag: 'd/app2' })).resolves.toMatchObject({
        status: 'imported',
      });
    } finally {
      front.faults.cutAfter = undefined;
    }
    expect(front.log.filter((l) => l === `GET /v2/mstest/app2/blobs/${top.digest}`)).toHaveLength(3);
  }, 120_000);

  it('a registry that dies mid-blob fails clearly, tags nothing, and a rerun finishes', async () => {
    const { reg, store } = fresh();
    const top = await topLayer('app2');
    front.faults.cutAfter = new Map([[top.digest, { after: 1000, times: 1_000 }]]);
    try {
      await expect(importImage(reg, store, `docker://${front.host}/mstest/app2:1`, { ...opts(), tag: 'e/app2' })).rejects.toMatchObject({
        code: 'REGISTRY_UNREACHABLE',
        hint: expect.stringMatching(/rerun resumes/),
      });
    } finally {
      front.faults.cutAfter = undefined;
    }
    expect(await reg.getRef('e/app2')).toBeNull();
    const again = await importImage(reg, store, `docker://${front.host}/mstest/app2:1`, { ...opts(), tag: 'e/app2' });
    expect(again.layers.map((l) => l.converted)).toEqual([false, true]);
  }, 120_000);
});
