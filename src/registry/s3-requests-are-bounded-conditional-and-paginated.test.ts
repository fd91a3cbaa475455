/**
 * What the S3 backend asks of the server, observed on the wire through a (fault-free) proxy:
 * existing blobs are not uploaded again, refs are written with conditional headers, listings
 * follow continuation tokens, large blobs go up in parts, and requests and bytes in flight stay
 * under the registry's bound.
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { useProxiedS3 } from '../../test/s3/proxied-s3.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

const MiB = 1024 * 1024;
const s3 = useProxiedS3('s3-wire-');

function reg(opts: S3RegistryOptions = {}): S3Registry {
  const r = new S3Registry(`s3://${s3.server.bucket}/w-${randomBytes(6).toString('hex')}`, {
    endpoint: s3.proxy.endpoint,
    region: s3.server.region,
    credentials: s3.server.credentials,
    partSize: 5 * MiB,
    ...opts,
  });
  s3.track(r);
  return r;
}

describe('S3 registry on the wire', () => {
  it('checks with HEAD and skips the upload of a blob that is already there', async () => {
    const r = reg();
    const data = randomBytes(10_000);
    await r.putBlob(sha256(data), data);
    const from = s3.proxy.log.length;
    await r.putBlob(sha256(data), data);
    const path = join(s3.scratch, 'again');
    await writeFile(path, data);
    await r.putBlobFile(sha256(data), path);
    expect(s3.proxy.log.slice(from).map((x) => x.method)).toEqual(['HEAD', 'HEAD']);
  });

  it('creates a ref with If-None-Match: * and replaces it with If-Match: <etag>', async () => {
    const r = reg();
    let from = s3.proxy.log.length;
    await r.putRef('ds/x', sha256('one'));
    const create = s3.proxy.log.slice(from).filter((x) => x.method === 'PUT');
    expect(create.map((x) => [x.ifNoneMatch, x.ifMatch])).toEqual([['*', undefined]]);
    from = s3.proxy.log.length;
    await r.putRef('ds/x', sha256('two'));
    const update = s3.proxy.log.slice(from).filter((x) => x.method === 'PUT');
    expect(update).toHaveLength(1);
    expect(update[0]!.ifNoneMatch).toBeUndefined();
    expect(update[0]!.ifMatch).toMatch(/^"?[0-9a-f]{32}"?$/);
    expect(await r.getRef('ds/x')).toBe(sha256('two'));
  });

  it('swaps a ref only from the value the caller saw', async () => {
    const r = reg();
    const [a, b, c] = [sha256('a'), sha256('b'), sha256('c')];
    expect(await r.compareAndSwapRef('t', null, a)).toBe(true);
    expect(await r.compareAndSwapRef('t', null, b)).toBe(false);
    expect(await r.compareAndSwapRef('t', b, c)).toBe(false);
    expect(await r.getRef('t')).toBe(a);
    expect(await r.compareAndSwapRef('t', a, c)).toBe(true);
    expect(await r.getRef('t')).toBe(c);
  });

  it('a ref write that loses a race gets 412 from an enforcing server: a swap reports false, a put tries again and wins', async () => {
    const r = reg();
    // The rival writes straight to the server, between our read of the ref and our write.
    const rival = new S3Registry(r.url, { endpoint: s3.server.endpoint, region: s3.server.region, credentials: s3.server.credentials });
    s3.track(rival);
    let rivalValue: string | undefined;
    const raceOnce = async (): Promise<void> => {
      if (rivalValue === undefined) return;
      const [name, v] = rivalValue.split('=') as [string, string];
      rivalValue = undefined;
      await rival.putRef(name, v as ReturnType<typeof sha256>);
    };
    s3.proxy.setPlan({ enforceConditionalWrites: true, beforeConditionalPut: raceOnce });
    const [a, b, c, d] = [sha256('a'), sha256('b'), sha256('c'), sha256('d')];
    // Create: our If-None-Match: * loses to the rival's create.
    rivalValue = `t=${b}`;
    let from = s3.proxy.log.length;
    expect(await r.compareAndSwapRef('t', null, a)).toBe(false);
    expect(s3.proxy.log.slice(from).filter((x) => x.preconditionFailed === true)).toHaveLength(1);
    expect(await r.getRef('t')).toBe(b);
    // Replace: our If-Match: <etag of b> loses to the rival's c; putRef reads again and wins.
    rivalValue = `t=${c}`;
    from = s3.proxy.log.length;
    await r.putRef('t', d);
    const puts = s3.proxy.log.slice(from).filter((x) => x.method === 'PUT');
    expect(puts.map((x) => x.preconditionFailed === true)).toEqual([true, false]);
    expect(await r.getRef('t')).toBe(d);
  });

  it('follows continuation tokens through every listing page', async () => {
    const r = reg({ listPageSize: 10 });
    const blobs = Array.from({ length: 35 }, (_, i) => Buffer.from(`b${i}`));
    for (let i = 0; i < blobs.length; i += 8) await Promise.all(blobs.slice(i, i + 8).map((b) => r.putBlob(sha256(b), b)));
    const from = s3.proxy.log.length;
    const seen = new Set<string>();
    for await (const b of r.listBlobs()) seen.add(b.digest);
    expect(seen.size).toBe(35);
    const lists = s3.proxy.log.slice(from).filter((x) => x.method === 'GET' && x.query.get('list-type') === '2');
    expect(lists).toHaveLength(4);
    expect(lists.slice(1).every((x) => x.query.has('continuation-token'))).toBe(true);
  });

  it('uploads a blob larger than the part size in parts and completes it once', async () => {
    const r = reg({ partConcurrency: 2 });
    const data = randomBytes(11 * MiB);
    const path = join(s3.scratch, 'large');
    await writeFile(path, data);
    const from = s3.proxy.log.length;
    await r.putBlobFile(sha256(data), path);
    const log = s3.proxy.log.slice(from);
    expect(log.filter((x) => x.method === 'POST' && x.query.has('uploads'))).toHaveLength(1);
    expect(
      log
        .filter((x) => x.method === 'PUT' && x.query.has('partNumber'))
        .map((x) => x.query.get('partNumber'))
        .sort(),
    ).toEqual(['1', '2', '3']);
    expect(log.filter((x) => x.method === 'POST' && x.query.has('uploadId'))).toHaveLength(1);
    expect((await r.getBlobRange(sha256(data), 5 * MiB - 10, 20)).equals(data.subarray(5 * MiB - 10, 5 * MiB + 10))).toBe(true);
  });

  it('keeps requests and bytes in flight under the bound however many calls are made at once', async () => {
    const r = reg({ inFlight: { maxRequests: 3, maxBytes: MiB } });
    const blobs = Array.from({ length: 30 }, () => randomBytes(300_000));
    const before = s3.proxy.peakConcurrent;
    await Promise.all(blobs.map((b) => r.putBlob(sha256(b), b)));
    await Promise.all(blobs.map((b) => r.getBlob(sha256(b))));
    expect(r.budget.peakRequests).toBeLessThanOrEqual(3);
    expect(r.budget.peakRequests).toBeGreaterThan(1);
    expect(r.budget.peakBytes).toBeLessThanOrEqual(MiB);
    // Other tests of this file ran before with their own bounds; this one must not raise the peak past 3.
    expect(Math.max(before, 3)).toBeGreaterThanOrEqual(s3.proxy.peakConcurrent);
  });
});
