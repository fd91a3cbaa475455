/**
 * Every error `serve` can answer has its shape, `{"error": {code, message, hint}}`, never fastify's
 * default body: unknown routes, malformed JSON, a body too large, a wrong content type, a bad URL,
 * requests that are not HTTP (before any route or token), and an error met while the answer's
 * headers are written. What a sandbox says (a file's name, what its own `stat` prints) never goes
 * raw into a header: a tenant's `stat` that prints control characters costs the mode header only.
 */
import { copyFileSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { buildApp } from './app.js';
import { SandboxManager } from './manager.js';
import { type RunningServer, storeProvider } from './serve.js';

const fx = new ServerFixture();
let small: RunningServer;
beforeAll(async () => {
  await fx.setUp();
  // a Debian-like environment: /bin/sh is dash, which finds `stat` on PATH (busybox's sh runs its own applet)
  await fx.pushBusybox(fx.reg, 'srv/dash', {}, (root) => {
    rmSync(join(root, 'bin/sh'));
    copyFileSync('/bin/dash', join(root, 'bin/dash'));
    symlinkSync('dash', join(root, 'bin/sh'));
    for (const d of ['lib/x86_64-linux-gnu', 'lib64']) mkdirSync(join(root, d), { recursive: true });
    copyFileSync('/lib/x86_64-linux-gnu/libc.so.6', join(root, 'lib/x86_64-linux-gnu/libc.so.6'));
    copyFileSync('/lib64/ld-linux-x86-64.so.2', join(root, 'lib64/ld-linux-x86-64.so.2'));
  });
  small = await fx.serveWithLimits({ bodyLimit: 1024 });
}, 120_000);
afterAll(() => fx.tearDown());

/** The server's error shape with `code`, and nothing of fastify's (statusCode, "error": "Bad Request"). */
function ourShape(code: string): unknown {
  return { error: { code, message: expect.any(String), hint: expect.any(String) } };
}

/** Sends `raw` bytes as they are and returns what comes back until the server closes. */
function rawRequest(server: RunningServer, raw: string): Promise<{ status: number; body: string }> {
  const port = Number(new URL(server.url).port);
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.end(raw));
    let got = '';
    s.on('data', (c: Buffer) => (got += c.toString('latin1')));
    s.on('error', reject);
    s.on('close', () => {
      const [head = '', body = ''] = got.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), body });
    });
  });
}

describe("the server's answers", () => {
  it('are in its error shape for unknown routes, bad JSON, a body too large, a wrong content type and a bad URL', async () => {
    const cases: Array<[string, Promise<{ status: number; json: () => Record<string, unknown> }>, number, string]> = [
      ['unknown route', fx.call('GET', '/v1/no-such-route'), 404, 'NOT_FOUND'],
      ['unknown method', fx.call('PATCH', '/v1/sandboxes'), 404, 'NOT_FOUND'],
      ['unknown route, SWE-ReX face', fx.call('GET', '/swerex/sb-x/no-such-route'), 404, 'NOT_FOUND'],
      ['bad JSON', fx.call('POST', '/v1/sandboxes', undefined, { raw: '{"ref": ', headers: { 'content-type': 'application/json' } }), 400, 'MALFORMED_BODY'],
      [
        'too large',
        fx.call('POST', '/v1/sandboxes', undefined, {
          server: small,
          raw: JSON.stringify({ ref: 'x'.repeat(4096) }),
          headers: { 'content-type': 'application/json' },
        }),
        413,
        'BODY_TOO_LARGE',
      ],
      ['content type', fx.call('POST', '/v1/sandboxes', undefined, { raw: '<ref/>', headers: { 'content-type': 'application/xml' } }), 415, 'INVALID_INPUT'],
      ['bad URL', fx.call('GET', '/v1/sandboxes/%zz'), 400, 'MALFORMED_REQUEST'],
      ['too long a path part', fx.call('GET', `/v1/sandboxes/${'a'.repeat(200)}`), 414, 'INVALID_INPUT'],
    ];
    for (const [what, answer, status, code] of cases) {
      const r = await answer;
      expect([what, r.status, r.json()]).toEqual([what, status, ourShape(code)]);
    }
  });

  it('are in its error shape for requests that are not HTTP, before any route or token', async () => {
    for (const [what, raw, status] of [
      ['a control character in a header', 'GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n', 400],
      ['no request line', 'NOT HTTP AT ALL\r\n\r\n', 400],
      ['headers too large', `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`, 431],
    ] as const) {
      const r = await rawRequest(fx.srv, raw);
      expect([what, r.status, JSON.parse(r.body)]).toEqual([what, status, ourShape('MALFORMED_REQUEST')]);
    }
  });

  it("send no file name and nothing a tenant's stat prints raw in a header, and an error while writing headers has the shape", async () => {
    const id = await fx.create({ ref: 'srv/dash' });
    const name = 'name\x01\x1b[1m';
    await fx.call('PUT', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(`/w/${name}`)}`, undefined, {
      raw: 'data',
      headers: { 'content-type': 'application/octet-stream' },
    });
    const listed = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/w`);
    expect(listed.json()).toEqual({ path: '/w', entries: [{ name, type: 'file', size: 4, mode: '644' }] });
    const plain = await fx.call('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(`/w/${name}`)}`);
    expect([plain.status, plain.text, plain.headers.get('x-file-mode')]).toEqual([200, 'data', '644']);

    // the tenant's own stat, first on PATH, prints a control character and a header line of its own
    const planted = await fx.call('POST', `/v1/sandboxes/${id}/exec`, {
      command:
        'mkdir -p /usr/local/bin && printf \'#!/bin/sh\\nprintf "644\\\\001\\\\r\\\\nX-Evil: 1"\\n\' > /usr/local/bin/stat && ' +
        'chmod 755 /usr/local/bin/stat && stat -c %a /w | od -c | head -1',
    });
    expect(planted.json(), planted.text).toMatchObject({ exit_code: 0, stdout: expect.stringContaining('001') });
    const r = await fx.call('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(`/w/${name}`)}`);
    expect(r.status, r.text).toBe(200);
    expect(r.text).toBe('data');
    expect(r.headers.get('x-file-mode')).toBeNull();
    expect(r.headers.get('x-evil')).toBeNull();
    // and the listing, which that stat breaks, says so in the server's shape
    const broken = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/w`);
    expect([broken.status, broken.json()]).toEqual([404, ourShape('SANDBOX_FILE')]);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it("keep the shape when writing the headers of an answer fails, and carry none of the failed answer's headers", async () => {
    const manager = new SandboxManager(storeProvider(fx.reg, fx.store), { maxSandboxes: 1, ttlMs: 60_000, idleMs: 60_000 });
    const app = buildApp(manager, { token: fx.token, log: () => undefined });
    // what a route that let a sandbox's text into a header would do
    app.get('/v1/test-header', async (_req, reply) => reply.header('x-from-sandbox', 'a\x01b').header('x-other', 'ok').send({ ok: true }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const addr = app.server.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      const r = await fetch(`http://127.0.0.1:${port}/v1/test-header`, { headers: { authorization: `Bearer ${fx.token}` } });
      expect([r.status, await r.json()]).toEqual([500, ourShape('INTERNAL')]);
      expect(r.headers.get('x-other')).toBeNull();
    } finally {
      await app.close();
    }
  });
});
