/**
 * Where a sandbox comes from (a ref, or a dataset instance), pre-warming environments into the
 * node's store so a create needs nothing more from the registry, and capacity with memory.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

describe('create sources', () => {
  it('creates from a dataset instance, and answers a missing, doubled or half source with 422 naming the field', async () => {
    await fx.pushBusybox(fx.reg, 'dsa/inst-1', { 'which.txt': 'inst-1' });
    const id = await fx.create({ dataset: 'dsa', instance_id: 'inst-1' });
    expect((await fx.call('GET', `/v1/sandboxes/${id}`)).json()).toMatchObject({ id, ref: 'dsa/inst-1' });
    expect((await fx.call('GET', `/v1/sandboxes/${id}/files?path=/which.txt`)).text).toBe('inst-1');
    await fx.call('DELETE', `/v1/sandboxes/${id}`);

    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, 'ref'],
      [{ env: { A: 'b' } }, 'ref'],
      [{ ref: 'srv/busybox', dataset: 'dsa', instance_id: 'inst-1' }, 'ref'],
      [{ dataset: 'dsa' }, 'instance_id'],
      [{ instance_id: 'inst-1' }, 'instance_id'],
      [{ ref: 'srv/busybox', instance_id: 'inst-1' }, 'instance_id'],
      [{ dataset: 'dsa', instance_id: '../etc' }, 'instance_id'],
      [{ ref: '' }, 'ref'],
    ];
    for (const [body, field] of cases) {
      const r = await fx.call('POST', '/v1/sandboxes', body);
      expect([body, r.status, r.json()]).toMatchObject([body, 422, { error: { code: 'INVALID_INPUT', field } }]);
    }
    const none = await fx.call('POST', '/v1/sandboxes', { dataset: 'dsa', instance_id: 'inst-404' });
    expect([none.status, none.json()]).toMatchObject([404, { error: { code: 'NOT_FOUND' } }]);
    expect((await fx.call('GET', '/v1/sandboxes')).json().sandboxes).toEqual([]);
  });
});

describe('prewarm', () => {
  it("lays out a list of refs or a dataset's instances, reports each, and a create afterwards needs no pack from the registry", async () => {
    // a registry and store of their own: nothing here is laid out before the prewarm
    const reg = new LocalRegistry(join(fx.work, 'registry-pw'));
    const store = new StorePaths(join(fx.work, 'store-pw'));
    // each with content of its own too large to travel inside its manifest: it comes from a pack
    const own = (): string => randomBytes(64 << 10).toString('hex');
    await fx.pushBusybox(reg, 'pw/one', { 'pw.txt': 'one', 'own.bin': own() });
    await fx.pushBusybox(reg, 'dsb/i-1', { 'pw.txt': 'i-1', 'own.bin': own() });
    await fx.pushBusybox(reg, 'dsb/i-2', { 'pw.txt': 'i-2', 'own.bin': own() });
    await fx.pushBusybox(reg, 'dsbx/i-9', { 'pw.txt': 'other dataset', 'own.bin': own() });
    const srv = await fx.serve({ reg, store });
    expect(existsSync(store.layersDir) ? readdirSync(store.layersDir).filter((n) => !n.startsWith('.')) : []).toEqual([]);

    const byRefs = await fx.call('POST', '/v1/prewarm', { refs: ['pw/one', 'pw/missing', 'pw/one'] }, { server: srv });
    expect(byRefs.status, byRefs.text).toBe(200);
    expect(byRefs.json()).toEqual({
      results: [
        { ref: 'pw/one', ok: true, fetched_bytes: expect.any(Number) },
        { ref: 'pw/missing', ok: false, error: { code: 'NOT_FOUND', message: expect.stringContaining('pw/missing') } },
      ],
    });
    const byDataset = await fx.call('POST', '/v1/prewarm', { dataset: 'dsb' }, { server: srv });
    expect(byDataset.json()).toEqual({
      results: [
        { ref: 'dsb/i-1', ok: true, fetched_bytes: expect.any(Number) },
        { ref: 'dsb/i-2', ok: true, fetched_bytes: expect.any(Number) },
      ],
    });
    expect((await fx.call('POST', '/v1/prewarm', { dataset: 'dsb', instance_ids: ['i-2'] }, { server: srv })).json()).toEqual({
      results: [{ ref: 'dsb/i-2', ok: true, fetched_bytes: 0 }],
    });

    // every pack leaves the registry: only what the prewarm laid out can start these
    const packs: string[] = [];
    for await (const p of reg.listPacks()) packs.push(p.pack);
    expect(packs.length).toBeGreaterThan(0);
    for (const p of packs) await reg.deleteBlob(p as `sha256:${string}`);
    for (const [body, want] of [
      [{ ref: 'pw/one' }, 'one'],
      [{ dataset: 'dsb', instance_id: 'i-1' }, 'i-1'],
    ] as const) {
      const id = await fx.create(body, srv);
      expect((await fx.call('GET', `/v1/sandboxes/${id}/files?path=/pw.txt`, undefined, { server: srv })).text).toBe(want);
      await fx.call('DELETE', `/v1/sandboxes/${id}`, undefined, { server: srv });
    }
    // what was not prewarmed cannot start now (the check above would pass for nothing otherwise)
    const cold = await fx.call('POST', '/v1/sandboxes', { ref: 'dsbx/i-9' }, { server: srv });
    expect(cold.status).not.toBe(201);

    for (const [body, field] of [
      [{}, 'refs'],
      [{ refs: [] }, 'refs'],
      [{ refs: ['a/b'], dataset: 'dsb' }, 'refs'],
      [{ instance_ids: ['i-1'] }, 'instance_ids'],
      [{ dataset: 'dsb', instance_ids: ['../x'] }, 'instance_ids.0'],
    ] as const) {
      const r = await fx.call('POST', '/v1/prewarm', body, { server: srv });
      expect([body, r.status, r.json()]).toMatchObject([body, 422, { error: { code: 'INVALID_INPUT', field } }]);
    }
    const noDataset = await fx.call('POST', '/v1/prewarm', { dataset: 'nothing-here' }, { server: srv });
    expect([noDataset.status, noDataset.json()]).toMatchObject([404, { error: { code: 'NOT_FOUND' } }]);
  });
});

describe('capacity', () => {
  it("reports live and max sandboxes and the host's and the sandboxes' memory", async () => {
    const id = await fx.create({ ref: 'srv/busybox', limits: { memory: '256m' } });
    // 32 MiB held in the sandbox's tmpfs upper dir, charged to its memory cgroup
    await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>/dev/null' });
    const c = (await fx.call('GET', '/v1/capacity')).json() as {
      live: number;
      max: number;
      memory: { total_bytes: number; available_bytes: number; sandboxes_bytes: number };
    };
    expect(c).toMatchObject({ live: 1, max: 8 });
    expect(c.memory.total_bytes).toBeGreaterThan(0);
    expect(c.memory.available_bytes).toBeGreaterThan(0);
    expect(c.memory.available_bytes).toBeLessThanOrEqual(c.memory.total_bytes);
    expect(c.memory.sandboxes_bytes).toBeGreaterThanOrEqual(32 << 20);
    expect(c.memory.sandboxes_bytes).toBeLessThan(c.memory.total_bytes);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
    expect((await fx.call('GET', '/v1/capacity')).json()).toMatchObject({ live: 0, memory: { sandboxes_bytes: 0 } });
  });
});
