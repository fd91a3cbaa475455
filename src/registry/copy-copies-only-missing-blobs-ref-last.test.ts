/**
 * copyRefs between a local directory registry and a real S3 server (s3rver behind a counting
 * proxy): only blobs the target lacks travel, every byte is verified on the way, and the ref is
 * written last, so a failed copy never leaves a ref pointing at missing blobs.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile, chmod } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Digest, sha256, digestHex } from '../cas/digest.js';
import { DigestMismatchError } from '../errors.js';
import { pushFakeEnv } from '../../test/s3/fake-env.js';
import { useProxiedS3 } from '../../test/s3/proxied-s3.js';
import { type CopyProgress, copyRefs } from './copy.js';
import { LocalRegistry } from './local.js';
import type { Registry } from './registry.js';
import { S3Registry } from './s3.js';

const MiB = 1024 * 1024;
const s3t = useProxiedS3('copy-test-');

function s3(viaProxy = true): S3Registry {
  const { server, proxy } = s3t;
  const r = new S3Registry(`s3://${server.bucket}/c-${randomBytes(6).toString('hex')}`, {
    endpoint: viaProxy ? proxy.endpoint : server.endpoint,
    region: server.region,
    credentials: server.credentials,
    partSize: 5 * MiB,
  });
  s3t.track(r);
  return r;
}

function sameS3(of: S3Registry): S3Registry {
  const { server } = s3t;
  const r = new S3Registry(of.url, { endpoint: server.endpoint, region: server.region, credentials: server.credentials, partSize: 5 * MiB });
  s3t.track(r);
  return r;
}

async function local(): Promise<LocalRegistry> {
  return new LocalRegistry(await mkdtemp(join(s3t.scratch, 'reg-')));
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function snapshot(reg: Registry): Promise<{ blobs: string[]; packs: string[]; refs: string[] }> {
  return {
    blobs: (await collect(reg.listBlobs())).map((b) => `${b.digest} ${b.size}`).sort(),
    packs: (await collect(reg.listPacks())).map((p) => `${p.pack} ${p.index}`).sort(),
    refs: (await collect(reg.listRefs())).map((r) => `${r.name} ${r.digest}`).sort(),
  };
}

const blobPuts = (from: number, prefix: string): number =>
  s3t.proxy.log.slice(from).filter((r) => r.method === 'PUT' && r.path.includes(`/${prefix}/blobs/`) && !r.query.has('partNumber')).length;
const allWrites = (from: number): number => s3t.proxy.log.slice(from).filter((r) => r.method === 'PUT' || r.method === 'POST').length;

describe('copyRefs', () => {
  it('mirrors local -> S3 -> local, then copies nothing the second time', async () => {
    const src = await local();
    const a = await pushFakeEnv(src, 'ds/a', { packSizes: [200_000, 6 * MiB], scratch: s3t.scratch });
    const b = await pushFakeEnv(src, 'ds/b', { packSizes: [300_000], reuse: a.packs, scratch: s3t.scratch });
    const dst = s3();
    const prefix = dst.location.prefix;
    const progress: CopyProgress[] = [];
    let from = s3t.proxy.log.length;
    const first = await copyRefs(src, dst, ['ds/a', 'ds/b'], { inMemoryMax: MiB, tmpDir: s3t.scratch, onProgress: (p) => progress.push(p) });
    const distinct = new Set([...a.blobs, ...b.blobs]);
    expect(first.blobsCopied).toBe(distinct.size);
    expect(first.blobsSkipped).toBe(0);
    expect(first.refsWritten).toBe(2);
    expect(first.catalogEntriesWritten).toBe(3);
    // Every small blob is one PUT; the 6 MiB pack goes up as a two-part multipart upload.
    expect(blobPuts(from, prefix)).toBe(distinct.size - 1);
    expect(s3t.proxy.log.slice(from).filter((r) => r.method === 'PUT' && r.query.has('partNumber')).length).toBe(2);
    expect(progress.at(-1)).toMatchObject({ phase: 'ref', ref: 'ds/b', refsDone: 2, refsTotal: 2, blobsCopied: distinct.size });
    expect(await snapshot(sameS3(dst))).toEqual(await snapshot(src));

    from = s3t.proxy.log.length;
    const again = await copyRefs(src, dst, 'all');
    expect(again).toMatchObject({ blobsCopied: 0, blobsSkipped: distinct.size, refsWritten: 0, catalogEntriesWritten: 0, bytesCopied: 0 });
    expect(allWrites(from)).toBe(0);

    const back = await local();
    await copyRefs(dst, back, 'all', { inMemoryMax: MiB, tmpDir: s3t.scratch });
    expect(await snapshot(back)).toEqual(await snapshot(src));
    for (const d of distinct) expect(sha256(await back.getBlob(d))).toBe(d);
  });

  it('copies only the new blobs of an environment that shares packs with one already there', async () => {
    const src = await local();
    const a = await pushFakeEnv(src, 'ds/a', { packSizes: [100_000, 100_000], scratch: s3t.scratch });
    const dst = s3();
    await copyRefs(src, dst, ['ds/a']);
    const b = await pushFakeEnv(src, 'ds/b', { packSizes: [50_000], reuse: a.packs, scratch: s3t.scratch });
    const from = s3t.proxy.log.length;
    const r = await copyRefs(src, dst, ['ds/b']);
    // new: one pack, its index, the manifest, the env config
    expect(r.blobsCopied).toBe(4);
    expect(r.blobsSkipped).toBe(b.blobs.length - 4);
    expect(blobPuts(from, dst.location.prefix)).toBe(4);
    expect(r.catalogEntriesWritten).toBe(1);
    expect(await sameS3(dst).getRef('ds/b')).toBe(b.env);
  });

  it('refuses a corrupt source blob and leaves the target without the ref or the bad bytes', async () => {
    const src = await local();
    const a = await pushFakeEnv(src, 'ds/bad', { packSizes: [400_000], scratch: s3t.scratch });
    const victim = a.packs[0]!.pack;
    const path = join(src.root, 'blobs', 'sha256', digestHex(victim));
    await chmod(path, 0o644);
    await writeFile(path, randomBytes(400_000));
    const dst = s3();
    await expect(copyRefs(src, dst, ['ds/bad'], { inMemoryMax: 1000, tmpDir: s3t.scratch })).rejects.toBeInstanceOf(DigestMismatchError);
    const direct = sameS3(dst);
    expect(await direct.getRef('ds/bad')).toBeNull();
    expect(await direct.statBlob(victim)).toBeNull();
  });

  it('lets concurrent pushers of overlapping environments leave every ref with its whole closure', async () => {
    const srcA = await local();
    const srcB = await local();
    const shared = await pushFakeEnv(srcA, 'base', { packSizes: [150_000, 150_000], scratch: s3t.scratch });
    await copyRefs(srcA, srcB, ['base']);
    const envs: { reg: LocalRegistry; tag: string; blobs: Digest[] }[] = [];
    for (let i = 0; i < 3; i++) {
      envs.push({ reg: srcA, tag: `ds/a${i}`, ...(await pushFakeEnv(srcA, `ds/a${i}`, { packSizes: [40_000], reuse: shared.packs, scratch: s3t.scratch })) });
      envs.push({ reg: srcB, tag: `ds/b${i}`, ...(await pushFakeEnv(srcB, `ds/b${i}`, { packSizes: [40_000], reuse: shared.packs, scratch: s3t.scratch })) });
    }
    // Both machines also race on the same tag with different environments.
    const raceA = await pushFakeEnv(srcA, 'ds/race', { packSizes: [10_000], reuse: shared.packs, scratch: s3t.scratch });
    const raceB = await pushFakeEnv(srcB, 'ds/race', { packSizes: [10_000], reuse: shared.packs, scratch: s3t.scratch });
    const target = s3(false);
    const machineA = sameS3(target);
    const machineB = sameS3(target);
    await Promise.all([copyRefs(srcA, machineA, 'all', { concurrency: 3 }), copyRefs(srcB, machineB, 'all', { concurrency: 3 })]);
    for (const e of envs) {
      expect(await target.getRef(e.tag)).toBe((await e.reg.getRef(e.tag))!);
    }
    const race = await target.getRef('ds/race');
    expect([raceA.env, raceB.env]).toContain(race);
    // Whatever won, every ref's closure is complete and intact.
    const check = await local();
    await copyRefs(target, check, 'all');
    for (const r of await collect(check.listRefs())) expect(await target.getRef(r.name)).toBe(r.digest);
  });
});
