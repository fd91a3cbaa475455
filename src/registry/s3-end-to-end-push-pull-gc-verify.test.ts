/**
 * The store's real push, pull, export, gc and verify, run against the S3 backend on a real S3
 * server: first straight, then through seeded random faults (5xx, resets, truncated bodies), where
 * every operation must still succeed through retries and reproduce the tree exactly.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FaultyProxy, startFaultyProxy } from '../../test/s3/faulty-proxy.js';
import { type S3TestServer, startS3Server } from '../../test/s3/server.js';
import { snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { exportEnv } from '../store/export.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../store/push.js';
import { verifyRegistry } from '../store/verify.js';
import { gcRegistry } from './gc.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

const work = mkdtempSync(join(tmpdir(), 's3-e2e-'));
let server: S3TestServer;
let proxy: FaultyProxy;
const regs: S3Registry[] = [];

beforeAll(async () => {
  server = await startS3Server();
  proxy = await startFaultyProxy(server.endpoint);
});
afterAll(async () => {
  for (const r of regs) r.close();
  await proxy?.stop();
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

function s3(prefix: string, opts: S3RegistryOptions = {}): S3Registry {
  const r = new S3Registry(`s3://${server.bucket}/${prefix}`, { endpoint: server.endpoint, region: server.region, credentials: server.credentials, partSize: 5 * 1024 * 1024, ...opts });
  regs.push(r);
  return r;
}

describe('store push, pull, gc and verify on the S3 backend', () => {
  it('round-trips trees, then gc removes exactly what no ref reaches and verify finds nothing wrong', async () => {
    const reg = s3(`e2e-${randomBytes(4).toString('hex')}`);
    const a = join(work, 'tree-a');
    const b = join(work, 'tree-b');
    makeRandomTree(a, 7, 150);
    makeRandomTree(b, 8, 150);
    await pushTree(reg, new StorePaths(join(work, 'push-store')), a, { tag: 'e2e/a' });
    await pushTree(reg, new StorePaths(join(work, 'push-store')), b, { tag: 'e2e/b' });
    const out = join(work, 'out-a');
    await exportEnv(reg, new StorePaths(join(work, 'node-store')), 'e2e/a', out);
    expect(snapshotTree(out, { xattrs: false })).toEqual(snapshotTree(a, { xattrs: false }));

    const before = await verifyRegistry(reg, work);
    expect(before.problems).toEqual([]);
    expect(before.refs).toBe(2);
    await reg.deleteRef('e2e/b');
    const gc = await gcRegistry(reg, { graceMs: 0, dryRun: false });
    expect(gc.removedBlobs.length).toBeGreaterThan(0);
    const after = await verifyRegistry(reg, work);
    expect(after.problems).toEqual([]);
    expect(after.blobs).toBe(before.blobs - gc.removedBlobs.length);
    const again = join(work, 'out-a-again');
    await exportEnv(reg, new StorePaths(join(work, 'node-store-2')), 'e2e/a', again);
    expect(snapshotTree(again, { xattrs: false })).toEqual(snapshotTree(a, { xattrs: false }));
  });

  it('pushes and pulls through seeded random faults and still reproduces the tree', async () => {
    const reg = s3(`e2e-faults-${randomBytes(4).toString('hex')}`, { endpoint: proxy.endpoint, retry: { attempts: 12, baseDelayMs: 2, maxDelayMs: 30 } });
    const src = join(work, 'tree-f');
    makeRandomTree(src, 11, 200);
    proxy.setPlan({ seed: 7, probabilities: { status500: 0.06, status503: 0.06, reset: 0.05, 'reset-after': 0.04, truncate: 0.06 } });
    await pushTree(reg, new StorePaths(join(work, 'push-store-f')), src, { tag: 'e2e/f' });
    const out = join(work, 'out-f');
    await exportEnv(reg, new StorePaths(join(work, 'node-store-f')), 'e2e/f', out);
    expect(proxy.faultsInjected).toBeGreaterThan(3);
    proxy.setPlan({});
    expect(snapshotTree(out, { xattrs: false })).toEqual(snapshotTree(src, { xattrs: false }));
    expect((await verifyRegistry(reg, work)).problems).toEqual([]);
  });
});
