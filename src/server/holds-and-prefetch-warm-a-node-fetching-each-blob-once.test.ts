/**
 * What a pool places by and how a node warms up, over HTTP: POST /v1/holds says, per ref, whether
 * the store holds the environment whole or how many of its layers (a shared base layer counts),
 * pulling nothing; POST /v1/prefetch pulls in the background within an I/O budget, GET reports its
 * progress; and every blob is read from the registry once, though the refs share a layer.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import type { Registry } from '../registry/registry.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { StorePaths } from '../store/paths.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

/** A registry that counts every read of a blob's bytes, by digest and range, and has no local files (as S3). */
function counting(inner: Registry): { reg: Registry; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const note = (key: string): void => void reads.set(key, (reads.get(key) ?? 0) + 1);
  const reg = Object.create(inner) as Registry;
  Object.defineProperty(reg, 'localFile', { value: undefined });
  reg.getBlob = (d) => (note(d), inner.getBlob(d));
  reg.getBlobRange = (d, off, len, into) => (note(`${d}@${off}`), inner.getBlobRange(d, off, len, into));
  reg.openBlob = (d, range) => (note(`${d}@${range?.offset ?? 0}`), inner.openBlob(d, range));
  return { reg, reads };
}

describe('holds and prefetch', () => {
  it('report warm layers, prefetch in the background, and fetch each blob once for refs sharing a layer', async () => {
    const inner = new LocalRegistry(join(fx.work, 'registry-hp'));
    await fx.pushBusybox(inner, 'hpbase/busybox');
    const base = await resolveEnv(inner, 'hpbase/busybox');
    for (const i of ['i-1', 'i-2', 'i-3']) {
      const dir = join(fx.work, `hp-${i}`);
      mkdirSync(join(dir, 'testbed'), { recursive: true });
      // large enough to come from a pack, not inside the manifest
      writeFileSync(join(dir, 'testbed', 'own.bin'), randomBytes(96 << 10));
      await pushTree(inner, new StorePaths(join(fx.work, 'push')), dir, { parent: base, tag: `hp/${i}` });
    }
    const { reg, reads } = counting(inner);
    const store = new StorePaths(join(fx.work, 'store-hp'));
    const srv = await fx.serve({ reg, store, more: { nodeName: 'warm-1' } });
    const call = (method: string, path: string, body?: unknown) => fx.call(method, path, body, { server: srv });

    const cold = await call('POST', '/v1/holds', { dataset: 'hp', instance_ids: ['i-1', 'i-3', 'nope'] });
    expect(cold.status, cold.text).toBe(200);
    expect(cold.json()).toEqual({
      node: 'warm-1',
      holds: [
        { ref: 'hp/i-1', env: expect.stringMatching(/^sha256:/), present: false, layers_present: 0, layers: 2 },
        { ref: 'hp/i-3', env: expect.stringMatching(/^sha256:/), present: false, layers_present: 0, layers: 2 },
        { ref: 'hp/nope', env: null, present: false, layers_present: 0, layers: 0 },
      ],
    });
    // holds pulled nothing: no pack was read
    const packs = new Set<string>();
    for await (const p of inner.listPacks()) packs.add(p.pack);
    expect([...reads.keys()].filter((k) => packs.has(k.split('@')[0]!))).toEqual([]);
    expect((await call('GET', '/v1/prefetch')).json()).toMatchObject({ state: 'idle', total: 0, done: 0, failed: [], started_at: null });

    reads.clear();
    const started = await call('POST', '/v1/prefetch', { dataset: 'hp', instance_ids: ['i-1', 'i-2'], io_budget: '1m' });
    expect(started.status, started.text).toBe(202);
    expect(started.json()).toMatchObject({ state: 'running', total: 2, io_budget_bytes: 1 << 20 });
    let status: Record<string, unknown> = {};
    await eventually(async () => (status = (await call('GET', '/v1/prefetch')).json()).state !== 'running');
    expect(status).toMatchObject({ state: 'done', total: 2, done: 2, failed: [], bytes_fetched: expect.any(Number) });
    expect(status.bytes_fetched as number).toBeGreaterThan(2 * (96 << 10));
    expect(Date.parse(status.finished_at as string)).toBeGreaterThanOrEqual(Date.parse(status.started_at as string));
    const twice = [...reads].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);
    // the base layer's pack, the two instances' own, their configs and manifests: all read, each once
    expect([...reads.keys()].filter((k) => packs.has(k.split('@')[0]!)).length).toBeGreaterThanOrEqual(3);

    const warm = (await call('POST', '/v1/holds', { refs: ['hp/i-1', 'hp/i-2', 'hp/i-3'] })).json();
    expect(warm.holds).toEqual([
      expect.objectContaining({ ref: 'hp/i-1', present: true, layers_present: 2, layers: 2 }),
      expect.objectContaining({ ref: 'hp/i-2', present: true, layers_present: 2, layers: 2 }),
      // never pulled, but its base layer is here
      expect.objectContaining({ ref: 'hp/i-3', present: false, layers_present: 1, layers: 2 }),
    ]);
    const id = await fx.create({ dataset: 'hp', instance_id: 'i-2' }, srv);
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'wc -c < /testbed/own.bin' })).json()).toMatchObject({ stdout: `${96 << 10}\n` });

    // a ref that cannot be pulled: the prefetch ends failed, naming it; the others are pulled
    expect((await call('POST', '/v1/prefetch', { refs: ['hp/i-3', 'hp/gone'] })).status).toBe(202);
    await eventually(async () => (status = (await call('GET', '/v1/prefetch')).json()).state !== 'running');
    expect(status).toMatchObject({
      state: 'failed',
      total: 2,
      done: 1,
      failed: [{ ref: 'hp/gone', code: 'NOT_FOUND', message: expect.stringContaining('hp/gone') }],
    });
    expect((await call('POST', '/v1/holds', { refs: ['hp/i-3'] })).json().holds).toEqual([expect.objectContaining({ present: true })]);

    for (const [path, body, field] of [
      ['/v1/holds', {}, 'refs'],
      ['/v1/holds', { dataset: 'hp' }, 'instance_ids'],
      ['/v1/holds', { refs: ['a/b'], dataset: 'hp', instance_ids: ['x'] }, 'refs'],
      ['/v1/prefetch', { refs: ['hp/i-1'], io_budget: 'lots' }, 'io_budget'],
      ['/v1/prefetch', { instance_ids: ['i-1'] }, 'instance_ids'],
    ] as const) {
      const r = await call('POST', path, body);
      expect([path, body, r.status, r.json()]).toMatchObject([path, body, 422, { error: { code: 'INVALID_INPUT', field } }]);
    }
    const none = await call('POST', '/v1/prefetch', { dataset: 'nothing-here' });
    expect([none.status, none.json()]).toMatchObject([404, { error: { code: 'NOT_FOUND' } }]);
  });
});
