/**
 * The store's real push, pull, export, gc and verify, run against the S3 backend on a real S3
 * server: first straight, then through seeded random faults (5xx, resets, truncated bodies), where
 * every operation must still succeed through retries and reproduce the tree exactly.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useProxiedS3 } from '../../test/s3/proxied-s3.js';
import { snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { exportEnv } from '../store/export.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { verifyRegistry } from '../store/verify.js';
import { gcRegistry } from './gc.js';
import { S3Registry, type S3RegistryOptions } from './s3.js';

const s3t = useProxiedS3('s3-e2e-');

function s3(prefix: string, opts: S3RegistryOptions = {}): S3Registry {
  const { server } = s3t;
  const r = new S3Registry(`s3://${server.bucket}/${prefix}`, {
    endpoint: server.endpoint,
    region: server.region,
    credentials: server.credentials,
    partSize: 5 * 1024 * 1024,
    ...opts,
  });
  s3t.track(r);
  return r;
}

describe('store push, pull, gc and verify on the S3 backend', () => {
  it('round-trips trees, then gc removes exactly what no ref reaches and verify finds nothing wrong', async () => {
    const reg = s3(`e2e-${randomBytes(4).toString('hex')}`);
    const a = join(s3t.scratch, 'tree-a');
    const b = join(s3t.scratch, 'tree-b');
    makeRandomTree(a, 7, 150);
    makeRandomTree(b, 8, 150);
    await pushTree(reg, new StorePaths(join(s3t.scratch, 'push-store')), a, { tag: 'e2e/a' });
    await pushTree(reg, new StorePaths(join(s3t.scratch, 'push-store')), b, { tag: 'e2e/b' });
    const out = join(s3t.scratch, 'out-a');
    await exportEnv(reg, new StorePaths(join(s3t.scratch, 'node-store')), 'e2e/a', out);
    expect(snapshotTree(out, { xattrs: false })).toEqual(snapshotTree(a, { xattrs: false }));

    const before = await verifyRegistry(reg, s3t.scratch);
    expect(before.problems).toEqual([]);
    expect(before.refs).toBe(2);
    await reg.deleteRef('e2e/b');
    const gc = await gcRegistry(reg, { graceMs: 0, dryRun: false });
    expect(gc.removedBlobs.length).toBeGreaterThan(0);
    const after = await verifyRegistry(reg, s3t.scratch);
    expect(after.problems).toEqual([]);
    expect(after.blobs).toBe(before.blobs - gc.removedBlobs.length);
    const again = join(s3t.scratch, 'out-a-again');
    await exportEnv(reg, new StorePaths(join(s3t.scratch, 'node-store-2')), 'e2e/a', again);
    expect(snapshotTree(again, { xattrs: false })).toEqual(snapshotTree(a, { xattrs: false }));
  });

  it('pushes and pulls through seeded random faults and still reproduces the tree', async () => {
    const reg = s3(`e2e-faults-${randomBytes(4).toString('hex')}`, { endpoint: s3t.proxy.endpoint, retry: { attempts: 12, baseDelayMs: 2, maxDelayMs: 30 } });
    const src = join(s3t.scratch, 'tree-f');
    makeRandomTree(src, 11, 200);
    s3t.proxy.setPlan({ seed: 7, probabilities: { status500: 0.06, status503: 0.06, reset: 0.05, 'reset-after': 0.04, truncate: 0.06 } });
    await pushTree(reg, new StorePaths(join(s3t.scratch, 'push-store-f')), src, { tag: 'e2e/f' });
    const out = join(s3t.scratch, 'out-f');
    await exportEnv(reg, new StorePaths(join(s3t.scratch, 'node-store-f')), 'e2e/f', out);
    expect(s3t.proxy.faultsInjected).toBeGreaterThan(3);
    s3t.proxy.setPlan({});
    expect(snapshotTree(out, { xattrs: false })).toEqual(snapshotTree(src, { xattrs: false }));
    expect((await verifyRegistry(reg, s3t.scratch)).problems).toEqual([]);
  });
});
