/**
 * `serve --prefetch-dataset FILE --ready-after-prefetch`: the node listens at once and serves,
 * but its readiness (`GET /v1/health?ready=1`, Kubernetes' readiness probe) answers 503 with
 * ready=false until every row's environment is in the store; liveness (`/v1/health`) stays 200.
 * The registry here holds its blobs back until the test lets them go, so "not yet" is seen for sure.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import type { Registry } from '../registry/registry.js';
import { StorePaths } from '../store/paths.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

describe('readiness after a start-up prefetch', () => {
  it('is false (503 to ?ready=1) while the dataset is pulled, and true once it is in the store', async () => {
    // the fixture's srv/busybox (as dataset "srv") and an alias of it, into a store of their own
    const inner = fx.reg;
    await inner.putRef('srv/alias', (await inner.getRef('srv/busybox'))!);
    const rows = join(fx.work, 'rows.jsonl');
    writeFileSync(
      rows,
      ['busybox', 'alias'].map((instance_id) => `${JSON.stringify({ instance_id, repo: 'o/r', base_commit: 'a'.repeat(40), version: '1' })}\n`).join(''),
    );
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const reg = Object.create(inner) as Registry;
    reg.getBlob = async (d) => {
      await gate;
      return inner.getBlob(d);
    };
    const srv = await fx.serve({
      reg,
      store: new StorePaths(join(fx.work, 'store-ready')),
      more: { prefetchDatasets: [`srv=${rows}`], readyAfterPrefetch: true, nodeName: 'n1' },
    });
    const health = async (q = ''): Promise<[number, Record<string, unknown>]> => {
      const r = await fetch(`${srv.url}/v1/health${q}`);
      return [r.status, (await r.json()) as Record<string, unknown>];
    };
    expect(await health('?ready=1')).toEqual([
      503,
      expect.objectContaining({ ok: true, node: 'n1', ready: false, prefetch: { state: 'running', total: 2, done: 0, failed: 0 } }),
    ]);
    expect(await health()).toEqual([200, expect.objectContaining({ ready: false })]);
    expect((await fx.call('GET', '/v1/prefetch', undefined, { server: srv })).json()).toMatchObject({ state: 'running', total: 2 });
    // it serves meanwhile
    expect((await fx.call('GET', '/v1/capacity', undefined, { server: srv })).json()).toMatchObject({ node: 'n1', free: 8 });

    release();
    await eventually(async () => (await health('?ready=1'))[0] === 200);
    expect((await health('?ready=1'))[1]).toMatchObject({ ready: true, prefetch: { state: 'done', total: 2, done: 2, failed: 0 } });
    const held = (await fx.call('POST', '/v1/holds', { dataset: 'srv', instance_ids: ['busybox', 'alias'] }, { server: srv })).json();
    expect(held.holds).toEqual([expect.objectContaining({ present: true }), expect.objectContaining({ present: true })]);
    expect(fx.logLines.map((l) => JSON.parse(l) as Record<string, unknown>)).toContainEqual(
      expect.objectContaining({ event: 'prefetch-ended', state: 'done', total: 2, done: 2 }),
    );
  });

  it('stops the start on a dataset file it cannot read', async () => {
    await expect(fx.serve({ more: { prefetchDatasets: [join(fx.work, 'no-such.jsonl')] } })).rejects.toThrow(/no-such\.jsonl/);
  });
});
