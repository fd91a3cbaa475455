/**
 * GET /v1/openapi.json against the routes fastify really has: every /v1 route is in the document
 * with its method, parameters and bodies (generated from the zod schemas the routes parse with),
 * and nothing is documented that the server does not answer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { buildApp } from './app.js';
import { SandboxManager } from './manager.js';
import { registeredRoutes } from './openapi.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

type Doc = { openapi: string; paths: Record<string, Record<string, Record<string, unknown>>> };

/** `GET /v1/sandboxes/{id}` for every /v1 route fastify has, and for every operation the document has. */
function compare(routes: ReadonlyArray<{ method: string; url: string }>, doc: Doc): { undocumented: string[]; unserved: string[] } {
  const served = new Set(routes.filter((r) => r.url.startsWith('/v1/')).map((r) => `${r.method} ${r.url.replace(/:([A-Za-z_]+)/g, '{$1}')}`));
  const documented = new Set(Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`)));
  return { undocumented: [...served].filter((r) => !documented.has(r)).sort(), unserved: [...documented].filter((r) => !served.has(r)).sort() };
}

describe('the OpenAPI document', () => {
  it('parses as OpenAPI 3.1 and lists exactly the /v1 routes the server registers, with parameters and bodies', async () => {
    const r = await fx.call('GET', '/v1/openapi.json');
    expect(r.status).toBe(200);
    const doc = JSON.parse(r.text) as Doc;
    expect(doc.openapi).toBe('3.1.0');
    const routes = registeredRoutes(fx.srv.app);
    expect(routes.length).toBeGreaterThan(20);
    expect(compare(routes, doc)).toEqual({ undocumented: [], unserved: [] });

    const create = doc.paths['/v1/sandboxes']!.post!;
    const createSchema = (create.requestBody as { content: Record<string, { schema: { properties: Record<string, unknown> } }> }).content['application/json']!
      .schema;
    expect(Object.keys(createSchema.properties)).toEqual(expect.arrayContaining(['ref', 'dataset', 'instance_id', 'limits', 'env', 'ttl']));
    expect(Object.keys(create.responses as object)).toEqual(expect.arrayContaining(['201', 'default']));

    const job = doc.paths['/v1/sandboxes/{id}/jobs/{job}']!.get!;
    expect(job.parameters).toEqual([
      expect.objectContaining({ name: 'id', in: 'path', required: true }),
      expect.objectContaining({ name: 'job', in: 'path', required: true }),
      expect.objectContaining({ name: 'wait', in: 'query', required: false, schema: expect.objectContaining({ maximum: 300 }) }),
    ]);
    const exec = doc.paths['/v1/sandboxes/{id}/exec']!.post!;
    expect(Object.keys(exec.responses as object)).toEqual(expect.arrayContaining(['200', '202']));
    expect(exec.parameters).toContainEqual(expect.objectContaining({ name: 'async', in: 'query' }));
    expect(doc.paths['/v1/sandboxes/{id}/tar']!.put!.requestBody).toMatchObject({ content: { 'application/x-tar': {} } });
    expect(doc.paths['/v1/sandboxes/{id}/files/list']!.get!.parameters).toContainEqual(expect.objectContaining({ name: 'path', in: 'query', required: true }));
    // every operation has its own id
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((o) => o.operationId));
    expect(new Set(ids).size).toBe(ids.length);

    // every documented route wants the token, but those documented as open (health, for probes)
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const url = path.replace('{id}', 'sb-x').replace('{sid}', 'ses-x').replace('{job}', 'job-0000000000000000');
        const open = Array.isArray(op.security) && op.security.length === 0;
        const res = await fx.call(method.toUpperCase(), open ? url : `${url}?path=/tmp`, undefined, { headers: { authorization: `Bearer ${fx.token}x` } });
        expect([method, path, res.status]).toEqual([method, path, open ? 200 : 401]);
      }
    }
    expect(Object.entries(doc.paths).flatMap(([p, ops]) => Object.values(ops).flatMap((o) => (Array.isArray(o.security) ? [p] : [])))).toEqual(['/v1/health']);
  });

  it('finds a route registered without an entry in the table', async () => {
    const mgr = new SandboxManager(
      { open: () => Promise.reject(new Error('unused')), fork: () => Promise.reject(new Error('unused')), reset: () => Promise.reject(new Error('unused')) },
      {
        maxSandboxes: 1,
        ttlMs: 60_000,
        idleMs: 60_000,
      },
    );
    const app = buildApp(mgr, { token: 'x'.repeat(32), log: () => undefined });
    app.get('/v1/sandboxes/:id/undocumented', async () => ({}));
    await app.ready();
    const doc = (await app.inject({ method: 'GET', url: '/v1/openapi.json', headers: { authorization: `Bearer ${'x'.repeat(32)}` } })).json() as Doc;
    expect(compare(registeredRoutes(app), doc)).toEqual({ undocumented: ['GET /v1/sandboxes/{id}/undocumented'], unserved: [] });
    await mgr.shutdown();
    await app.close();
  });
});
