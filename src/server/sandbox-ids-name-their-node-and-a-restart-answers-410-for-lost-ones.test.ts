/**
 * A server of a pool says which node it is: its sandbox ids (a fork's children's too) end in
 * `.<node>`, /v1/health names it (without a token: probes send none) with its start, and
 * /v1/capacity adds node and free. After a restart over the same store, an id the node made
 * before is answered 410 NODE_RESTARTED; any other unknown id stays 404.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { nodeLabel, nodeName } from './node-identity.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

describe('node names', () => {
  it('come from --node-name, else $MINISANDBOX_NODE_NAME, else the host name, made a DNS label', () => {
    expect(nodeName('Node_1.Example.COM', {}, 'h')).toBe('node-1-example-com');
    expect(nodeName(undefined, { MINISANDBOX_NODE_NAME: 'ip-10-0-0-7.ec2.internal' }, 'h')).toBe('ip-10-0-0-7-ec2-internal');
    expect(nodeName(undefined, { MINISANDBOX_NODE_NAME: '' }, 'worker-3')).toBe('worker-3');
    expect(nodeLabel(`--${'a'.repeat(39)}-b`)).toBe('a'.repeat(39));
    expect(() => nodeName('..._', {}, 'h')).toThrow(/--node-name "..._" has no letter or digit/);
  });
});

describe('a node', () => {
  it('names itself in ids, health and capacity, and answers 410 for the sandboxes a restart lost', async () => {
    const a = await fx.serve({ more: { nodeName: 'Node-A', version: '9.9.9' } });
    const health = await fetch(`${a.url}/v1/health`); // no token
    expect(health.status).toBe(200);
    const h = (await health.json()) as Record<string, unknown>;
    expect(h).toMatchObject({ ok: true, node: 'node-a', version: '9.9.9', ready: true });
    expect(Date.parse(h.started_at as string)).toBeLessThanOrEqual(Date.now());
    // the open route is health alone
    expect((await fetch(`${a.url}/v1/capacity`)).status).toBe(401);

    const id = await fx.create({ ref: 'srv/busybox' }, a);
    expect(id).toMatch(/^sb-[0-9a-z]+-[0-9a-f]{8}\.node-a$/);
    const fork = await fx.call('POST', `/v1/sandboxes/${id}/fork`, { count: 2 }, { server: a });
    const children = (fork.json().children as Array<{ id: string }>).map((c) => c.id);
    expect(children).toHaveLength(2);
    for (const c of children) expect(c).toMatch(/\.node-a$/);
    expect((await fx.call('POST', `/v1/sandboxes/${children[0]}/exec`, { command: 'echo ok' }, { server: a })).json()).toMatchObject({ stdout: 'ok\n' });
    // the SWE-ReX face takes such an id as its key
    const alive = await fx.call('GET', `/swerex/${id}/is_alive`, undefined, { server: a });
    expect(alive.json()).toEqual({ is_alive: true, message: '' });
    expect((await fx.call('GET', '/v1/capacity', undefined, { server: a })).json()).toMatchObject({ node: 'node-a', live: 3, max: 8, free: 5 });

    await a.close();
    const b = await fx.serve({ more: { nodeName: 'node-a' } });
    for (const lost of [id, ...children]) {
      const r = await fx.call('POST', `/v1/sandboxes/${lost}/exec`, { command: 'true' }, { server: b });
      expect([r.status, r.json()]).toEqual([
        410,
        {
          error: {
            code: 'NODE_RESTARTED',
            message: expect.stringMatching(new RegExp(`^sandbox ${lost} was lost when node node-a restarted at `)),
            hint: expect.any(String),
          },
        },
      ]);
    }
    expect((await fx.call('DELETE', `/v1/sandboxes/${id}`, undefined, { server: b })).status).toBe(410);
    const fresh = await fx.create({ ref: 'srv/busybox' }, b);
    await fx.call('DELETE', `/v1/sandboxes/${fresh}`, undefined, { server: b });
    const unknown: string[] = [
      fresh, // made by this process, then deleted
      `sb-${(Date.now() + 60_000).toString(36)}-00000000.node-a`, // "made" after the start
      id.replace('.node-a', '.node-b'), // another node's
      id.replace('.node-a', ''), // no node
    ];
    for (const other of unknown) {
      const r = await fx.call('GET', `/v1/sandboxes/${other}`, undefined, { server: b });
      expect([other, r.status, r.json()]).toMatchObject([other, 404, { error: { code: 'NOT_FOUND' } }]);
    }
    for (const bad of ['sb-x.', 'sb-x.node.a', `sb-x.${'n'.repeat(41)}`, 'sb-x.-a'])
      expect([bad, (await fx.call('GET', `/v1/sandboxes/${bad}`, undefined, { server: b })).status]).toEqual([bad, 422]);
    await b.close();
  });
});
