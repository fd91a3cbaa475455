/**
 * Through a fault-injecting proxy in front of a real S3 server: transient failures are retried
 * until the operation succeeds, persistent ones end in a typed error, and nothing partial (a
 * short read, a half-uploaded blob) is ever returned or becomes visible.
 */
import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { useProxiedS3 } from '../../test/s3/proxied-s3.js';
import { RemoteStoreError } from './retry.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

const MiB = 1024 * 1024;
const s3 = useProxiedS3('s3-faults-');

/** A registry through the proxy, and one straight to the server to look at what is really there. */
function pair(opts: S3RegistryOptions = {}): { reg: S3Registry; direct: S3Registry; retries: string[] } {
  const prefix = `f-${randomBytes(6).toString('hex')}`;
  const retries: string[] = [];
  const base = { region: s3.server.region, credentials: s3.server.credentials, partSize: 5 * MiB };
  const reg = new S3Registry(`s3://${s3.server.bucket}/${prefix}`, {
    ...base,
    endpoint: s3.proxy.endpoint,
    retry: { attempts: 6, baseDelayMs: 5, maxDelayMs: 40 },
    hooks: { onRetry: (i) => retries.push(i.what) },
    ...opts,
  });
  const direct = new S3Registry(`s3://${s3.server.bucket}/${prefix}`, { ...base, endpoint: s3.server.endpoint });
  s3.track(reg, direct);
  return { reg, direct, retries };
}

function sha(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

describe('S3 registry under injected faults', () => {
  it('retries a PUT answered 503 SlowDown, 500 and a connection reset until it lands', async () => {
    const { reg, direct, retries } = pair();
    const data = randomBytes(70_000);
    s3.proxy.setPlan({ schedule: ['status503', 'status500', 'reset'], match: (r) => r.method === 'PUT' });
    const before = s3.proxy.count('PUT');
    await reg.putBlob(sha256(data), data);
    expect(retries.length).toBe(3);
    expect(s3.proxy.count('PUT') - before).toBe(4);
    expect((await direct.getBlob(sha256(data))).equals(data)).toBe(true);
  });

  it('never returns a truncated body: the GET is retried', async () => {
    const { reg, direct, retries } = pair();
    const data = randomBytes(MiB);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: ['truncate', 'truncate'], match: (r) => r.method === 'GET' });
    expect((await reg.getBlob(sha256(data))).equals(data)).toBe(true);
    expect(retries.length).toBe(2);
    const range = await reg.getBlobRange(sha256(data), 1000, 5000);
    expect(range.equals(data.subarray(1000, 6000))).toBe(true);
  });

  it('resumes a broken stream with a ranged GET from the last byte received', async () => {
    const { reg, direct } = pair();
    const data = randomBytes(3 * MiB);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: ['truncate'], match: (r) => r.method === 'GET' });
    const from = s3.proxy.log.length;
    const h = createHash('sha256');
    for await (const c of await reg.openBlob(sha256(data))) h.update(c as Buffer);
    expect(`sha256:${h.digest('hex')}`).toBe(sha256(data));
    const gets = s3.proxy.log.slice(from).filter((r) => r.method === 'GET');
    expect(gets.length).toBe(2);
    expect(gets[0]!.range).toBeUndefined();
    const resumeAt = Number(/^bytes=(\d+)-/.exec(gets[1]!.range ?? '')?.[1]);
    expect(resumeAt).toBeGreaterThan(0);
    expect(resumeAt).toBeLessThan(data.length);
  });

  it('abandons an answer slower than the idle timeout and retries it', async () => {
    const { reg, direct, retries } = pair({ idleTimeoutMs: 300 });
    const data = randomBytes(1000);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: ['slow'], slowMs: 3000, match: (r) => r.method === 'GET' });
    expect((await reg.getBlob(sha256(data))).equals(data)).toBe(true);
    // the retry is the proof it was abandoned: the slow answer, awaited, would have needed none
    expect(retries.length).toBe(1);
  });

  it('abandons a body that stalls half-way on an open connection, for whole reads and streams', async () => {
    const { reg, direct, retries } = pair({ idleTimeoutMs: 400 });
    const data = randomBytes(2 * MiB);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: ['stall', 'stall'], match: (r) => r.method === 'GET' });
    expect((await reg.getBlob(sha256(data))).equals(data)).toBe(true);
    const h = createHash('sha256');
    for await (const c of await reg.openBlob(sha256(data))) h.update(c as Buffer);
    expect(`sha256:${h.digest('hex')}`).toBe(sha256(data));
    // a stalled body never ends by itself: two retries, one per read, are what ended them
    expect(retries.length).toBe(2);
  });

  it('retries a request the server never answers (stopped, connection open) after its idle timeout', async () => {
    const { reg, direct, retries } = pair({ idleTimeoutMs: 300 });
    const data = randomBytes(100_000);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: ['silent'], match: (r) => r.method === 'GET' });
    expect((await reg.getBlob(sha256(data))).equals(data)).toBe(true);
    expect(retries).toHaveLength(1);
  });

  it('fails with a message after three unanswered attempts in a row, before its other attempts', async () => {
    const { reg, direct } = pair({ idleTimeoutMs: 300 });
    const data = randomBytes(1000);
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ probabilities: { silent: 1 }, maxFaults: 1000, match: (r) => r.method === 'GET' });
    const before = s3.proxy.count('GET');
    const err = await reg.getBlob(sha256(data)).then(
      () => null,
      (e: unknown) => e,
    );
    s3.proxy.setPlan({});
    expect(err).toBeInstanceOf(RemoteStoreError);
    expect((err as RemoteStoreError).message).toMatch(/no answer from the registry, 3 attempts in a row timed out/);
    expect((err as RemoteStoreError).hint).toMatch(/\w/);
    expect(s3.proxy.count('GET') - before).toBe(3);
  });

  it('lands a ref write whose answer was lost, and reads it back', async () => {
    const { reg, direct } = pair();
    const d = sha256('env');
    s3.proxy.setPlan({ schedule: ['reset-after'], match: (r) => r.method === 'PUT' });
    await reg.putRef('ds/task-1', d);
    expect(await direct.getRef('ds/task-1')).toBe(d);
  });

  it('finishes a multipart upload whose completion answer was lost', async () => {
    const { reg, direct } = pair();
    const data = randomBytes(11 * MiB);
    const path = join(s3.scratch, 'mp-lost-answer');
    await writeFile(path, data);
    s3.proxy.setPlan({ schedule: ['reset-after'], match: (r) => r.method === 'POST' && r.query.has('uploadId') });
    await reg.putBlobFile(sha256(data), path);
    expect((await direct.statBlob(sha256(data)))?.size).toBe(data.length);
    expect(sha(await direct.getBlob(sha256(data)))).toBe(sha256(data));
  });

  it('fails a multipart upload whose parts keep failing with a typed error, aborts it, and leaves no blob', async () => {
    const { reg, direct } = pair({ retry: { attempts: 3, baseDelayMs: 5, maxDelayMs: 20 } });
    const data = randomBytes(11 * MiB);
    const path = join(s3.scratch, 'mp-fails');
    await writeFile(path, data);
    s3.proxy.setPlan({
      schedule: Array.from({ length: 50 }, () => 'status503' as const),
      match: (r) => r.method === 'PUT' && r.query.has('partNumber') && r.query.get('partNumber') !== '1',
    });
    const from = s3.proxy.log.length;
    const err = await reg.putBlobFile(sha256(data), path).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RemoteStoreError);
    expect((err as RemoteStoreError).status).toBe(503);
    expect((err as RemoteStoreError).attempts).toBe(3);
    expect(await direct.statBlob(sha256(data))).toBeNull();
    const listed: string[] = [];
    for await (const b of direct.listBlobs()) listed.push(b.digest);
    expect(listed).toEqual([]);
    expect(s3.proxy.log.slice(from).some((r) => r.method === 'DELETE' && r.query.has('uploadId'))).toBe(true);
    expect(s3.proxy.log.slice(from).some((r) => r.method === 'POST' && r.query.has('uploadId'))).toBe(false);
  });

  it('does not retry an answer that will not change (403 from an unknown access key)', async () => {
    const { reg } = pair({ credentials: { accessKeyId: 'NOT-A-KEY', secretAccessKey: 'wrong' } });
    const err = await reg.putBlob(sha256('x'), Buffer.from('x')).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RemoteStoreError);
    expect((err as RemoteStoreError).attempts).toBe(1);
    expect((err as RemoteStoreError).status).toBe(403);
  });

  it('gives up after its attempts with a typed error when the server keeps failing', async () => {
    const { reg, direct } = pair({ retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 } });
    const data = Buffer.from('present');
    await direct.putBlob(sha256(data), data);
    s3.proxy.setPlan({ schedule: Array.from({ length: 10 }, () => 'status500' as const), match: (r) => r.method === 'GET' });
    await expect(reg.getBlob(sha256(data))).rejects.toMatchObject({ code: 'REMOTE_STORE', attempts: 3, status: 500 });
  });

  it('pushes and reads back many blobs and refs intact through seeded random faults', async () => {
    const { reg, direct } = pair({ retry: { attempts: 12, baseDelayMs: 2, maxDelayMs: 30 }, inFlight: { maxRequests: 4 } });
    s3.proxy.setPlan({ seed: 42, probabilities: { status500: 0.08, status503: 0.08, reset: 0.06, 'reset-after': 0.05, truncate: 0.08 } });
    const blobs = Array.from({ length: 24 }, (_, i) => randomBytes(1000 + i * 9000));
    await Promise.all(blobs.map((b) => reg.putBlob(sha256(b), b)));
    for (let i = 0; i < 6; i++) await reg.putRef(`ds/t${i}`, sha256(blobs[i]!));
    const back = await Promise.all(blobs.map((b) => reg.getBlob(sha256(b))));
    back.forEach((b, i) => expect(sha(b)).toBe(sha256(blobs[i]!)));
    for (let i = 0; i < 6; i++) expect(await reg.getRef(`ds/t${i}`)).toBe(sha256(blobs[i]!));
    expect(s3.proxy.faultsInjected).toBeGreaterThan(5);
    expect(reg.budget.peakRequests).toBeLessThanOrEqual(4);
    s3.proxy.setPlan({});
    let n = 0;
    for await (const b of direct.listBlobs()) {
      expect(sha(await direct.getBlob(b.digest))).toBe(b.digest);
      n++;
    }
    expect(n).toBe(blobs.length);
  });
});
