/**
 * The sandbox server over real HTTP (127.0.0.1, a random port) and real sandboxes of a busybox
 * environment pulled from a temporary registry into a temporary store.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import type { RunningServer } from './serve.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());
const call = fx.call.bind(fx);
const { store, logLines } = fx;

/** A sandbox of `srv/busybox` with `body` on top (the fixture's create fails on anything but a 201). */
function create(body: Record<string, unknown> = {}, server?: RunningServer): Promise<string> {
  return fx.create({ ref: 'srv/busybox', ...body }, server);
}

describe('the sandbox server over HTTP', () => {
  it('creates a sandbox, runs commands, reads and writes files, keeps session state, forks and deletes it, leaving nothing', async () => {
    const id = await create({ env: { EXTRA: 'x1' }, limits: { memory: '256m', pids: 64 }, ttl: '48h' });
    const info = (await call('GET', `/v1/sandboxes/${id}`)).json();
    expect(info).toMatchObject({ id, ref: 'srv/busybox' });
    // a create may not ask for more than the server's --ttl (1h here)
    expect(Date.parse(info.expires_at as string) - Date.parse(info.created_at as string)).toBe(3_600_000);
    expect((await call('GET', '/v1/sandboxes')).json().sandboxes).toEqual([expect.objectContaining({ id })]);

    const ex = (await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'echo "$GREETING $EXTRA $(pwd)"; echo err >&2; exit 3' })).json();
    expect(ex).toMatchObject({ stdout: 'hello x1 /root\n', stderr: 'err\n', exit_code: 3, outcome: 'ok', stdout_truncated: false, stderr_truncated: false });
    expect(typeof ex.duration_ms).toBe('number');
    const argv = (
      await call('POST', `/v1/sandboxes/${id}/exec`, { argv: ['/bin/sh', '-c', 'echo "$1 $V"; pwd', 'sh', 'a b'], cwd: '/tmp', env: { V: 'v' } })
    ).json();
    expect(argv).toMatchObject({ stdout: 'a b v\n/tmp\n', exit_code: 0, outcome: 'ok' });
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'sleep 30', timeout: 0.3 })).json()).toMatchObject({ outcome: 'timeout' });
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'yes | head -c 5000', max_output: 100 })).json()).toMatchObject({
      stdout_truncated: true,
      outcome: 'ok',
    });

    const bin = Buffer.from([0, 1, 2, 255, 10]);
    const put = await call('PUT', `/v1/sandboxes/${id}/files?path=/work/sub/blob.bin&mode=750`, undefined, {
      raw: bin,
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(put.status, put.text).toBe(204);
    const got = await call('GET', `/v1/sandboxes/${id}/files?path=/work/sub/blob.bin`);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(bin)).toBe(true);
    expect(got.headers.get('x-file-mode')).toBe('750');
    const missingFile = await call('GET', `/v1/sandboxes/${id}/files?path=/nope`);
    expect([missingFile.status, missingFile.json()]).toMatchObject([404, { error: { code: 'SANDBOX_FILE' } }]);
    // a write under a regular file cannot make its parent: the request is wrong, not the file missing
    const underFile = await call('PUT', `/v1/sandboxes/${id}/files?path=/work/sub/blob.bin/child`, undefined, {
      raw: 'x',
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect([underFile.status, underFile.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT' } }]);

    const ses = await call('POST', `/v1/sandboxes/${id}/sessions`, { startup: ['mkdir -p /work/proj', 'cd /work/proj'] });
    expect(ses.status, ses.text).toBe(201);
    const sid = ses.json().session as string;
    expect(
      (await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'export TOKEN_X=42; cd sub 2>/dev/null || mkdir sub && cd sub' })).json(),
    ).toMatchObject({ exit_code: 0 });
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'echo "$TOKEN_X $(pwd)"' })).json()).toMatchObject({
      stdout: '42 /work/proj/sub\n',
      outcome: 'ok',
    });
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'sleep 30', timeout: 0.3 })).json()).toMatchObject({ outcome: 'timeout' });
    // a timeout interrupts the command and keeps the shell and its state
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'echo $TOKEN_X' })).json()).toMatchObject({ stdout: '42\n' });
    const marker = sleepMarker();
    const long = call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: `sleep ${marker}` });
    // interrupted once the sleep runs: before, the shell itself would be the one to get it
    await eventually(() => sleepRuns(marker));
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/interrupt`)).status).toBe(204);
    // the sleep got the SIGINT (exit 130); the shell and its state stayed
    expect((await long).json()).toMatchObject({ outcome: 'ok', exit_code: 130 });
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'echo $TOKEN_X' })).json()).toMatchObject({ stdout: '42\n' });
    expect((await call('DELETE', `/v1/sandboxes/${id}/sessions/${sid}`)).status).toBe(204);
    expect((await call('POST', `/v1/sandboxes/${id}/sessions/${sid}/run`, { command: 'true' })).status).toBe(404);

    const fork = await call('POST', `/v1/sandboxes/${id}/fork`, { count: 2 });
    expect(fork.status, fork.text).toBe(200);
    const children = fork.json().children as Array<{ id: string }>;
    expect(children).toHaveLength(2);
    for (const c of children) {
      // each child has the parent's files, and its writes are its own
      expect((await call('GET', `/v1/sandboxes/${c.id}/files?path=/work/sub/blob.bin`)).bytes.equals(bin)).toBe(true);
      await call('POST', `/v1/sandboxes/${c.id}/exec`, { command: `echo ${c.id} > /work/who` });
    }
    expect((await call('GET', `/v1/sandboxes/${children[0]!.id}/files?path=/work/who`)).text).toBe(`${children[0]!.id}\n`);
    expect((await call('GET', `/v1/sandboxes/${id}/files?path=/work/who`)).status).toBe(404);
    expect((await call('GET', '/v1/capacity')).json()).toMatchObject({ live: 3, max: 8 });

    // a client that sends its JSON content type on every request, bodyless DELETE included
    for (const s of [id, ...children.map((c) => c.id)])
      expect((await call('DELETE', `/v1/sandboxes/${s}`, undefined, { headers: { 'content-type': 'application/json' } })).status).toBe(204);
    expect((await call('GET', `/v1/sandboxes/${id}`)).status).toBe(404);
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'true' })).status).toBe(404);
    expect(readdirSync(store.sandboxesDir)).toEqual([]);
    expect(readdirSync(store.leasesDir)).toEqual([]);

    const metrics = await call('GET', '/metrics');
    expect(metrics.text).toContain('minisandbox_sandboxes_live 0');
    expect(metrics.text).toMatch(/minisandbox_sandbox_creates_total [3-9]/);
    expect(metrics.text).toMatch(/minisandbox_exec_duration_seconds_count [1-9]/);
    expect(metrics.text).toMatch(/minisandbox_errors_total\{kind="NOT_FOUND"\} [1-9]/);
    // the request log: one JSON object per request, never the token
    const entries = logLines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(entries).toContainEqual(expect.objectContaining({ method: 'POST', url: '/v1/sandboxes', status: 201 }));
    expect(logLines.join('\n')).not.toContain(fx.token);
  });

  it('answers 401 on every route without the token or with a wrong one, and accepts X-API-Key', async () => {
    const id = await create();
    // every route but GET /v1/health (open for probes: see the node identity test)
    const routes: Array<[string, string]> = [
      ['GET', '/v1/capacity'],
      ['GET', '/metrics'],
      ['POST', '/v1/sandboxes'],
      ['GET', '/v1/sandboxes'],
      ['GET', `/v1/sandboxes/${id}`],
      ['DELETE', `/v1/sandboxes/${id}`],
      ['POST', `/v1/sandboxes/${id}/exec`],
      ['POST', `/v1/sandboxes/${id}/sessions`],
      ['POST', `/v1/sandboxes/${id}/sessions/ses-1/run`],
      ['POST', `/v1/sandboxes/${id}/sessions/ses-1/interrupt`],
      ['DELETE', `/v1/sandboxes/${id}/sessions/ses-1`],
      ['GET', `/v1/sandboxes/${id}/files?path=/etc/passwd`],
      ['PUT', `/v1/sandboxes/${id}/files?path=/tmp/x`],
      ['GET', `/v1/sandboxes/${id}/diff`],
      ['POST', `/v1/sandboxes/${id}/fork`],
      ['GET', '/no/such/route'],
    ];
    for (const [method, path] of routes) {
      for (const headers of [
        { authorization: '' },
        { authorization: `Bearer ${fx.token}x` },
        { authorization: 'Basic abc' },
        { authorization: '', 'x-api-key': 'wrong' },
      ] as Array<Record<string, string>>) {
        const r = await call(method, path, method === 'POST' ? { ref: 'srv/busybox', command: 'true', count: 1 } : undefined, { headers });
        expect([method, path, r.status]).toEqual([method, path, 401]);
        expect(r.json()).toMatchObject({ error: { code: 'UNAUTHORIZED' } });
      }
    }
    // none of those reached the sandbox: it is still there, alone
    expect((await call('GET', '/v1/sandboxes')).json().sandboxes).toEqual([expect.objectContaining({ id })]);
    expect((await call('GET', '/v1/capacity', undefined, { headers: { authorization: '', 'x-api-key': fx.token } })).status).toBe(200);
    await call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('checks the token on every request of a kept-alive connection, after it once sent the right one', async () => {
    // one connection for all: the server skips the digest for a token that connection already proved
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const { hostname, port } = new URL(fx.srv.url);
    const get = (headers: Record<string, string>): Promise<{ status: number; reused: boolean }> =>
      new Promise((res, rej) => {
        const req = request({ hostname, port, path: '/v1/capacity', agent, headers }, (r) => {
          r.resume();
          r.on('end', () => res({ status: r.statusCode ?? 0, reused: req.reusedSocket }));
        });
        req.on('error', rej);
        req.end();
      });
    try {
      expect(await get({ authorization: `Bearer ${fx.token}` })).toEqual({ status: 200, reused: false });
      const wrong: Record<string, string>[] = [
        { authorization: `Bearer ${fx.token}x` },
        {},
        { 'x-api-key': 'wrong' },
        { authorization: `Bearer ${fx.token.slice(0, -1)}` },
      ];
      for (const headers of wrong) expect(await get(headers)).toEqual({ status: 401, reused: true });
      expect(await get({ 'x-api-key': fx.token })).toEqual({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  });

  it('answers bad JSON with 400, a schema failure with 422 naming the field, and an oversized body with 413', async () => {
    const bad = await call('POST', '/v1/sandboxes', undefined, { raw: '{"ref": ', headers: { 'content-type': 'application/json' } });
    expect(bad.status).toBe(400);
    expect(bad.json()).toMatchObject({ error: { code: 'MALFORMED_BODY' } });
    const field = await call('POST', '/v1/sandboxes', { ref: 'srv/busybox', limits: { memory: 'lots' } });
    expect(field.status).toBe(422);
    expect(field.json()).toMatchObject({ error: { code: 'INVALID_INPUT', field: 'limits.memory' } });
    expect((await call('POST', '/v1/sandboxes', { ref: 'srv/busybox', colour: 'red' })).status).toBe(422);
    const missing = await call('POST', '/v1/sandboxes/sb-x/exec', {});
    expect(missing.status).toBe(422);
    expect(missing.json()).toMatchObject({ error: { field: 'argv' } });
    const big = await call('POST', '/v1/sandboxes/sb-x/exec', { command: 'x'.repeat(9 << 20) });
    expect(big.status).toBe(413);
    expect(big.json()).toMatchObject({ error: { code: 'BODY_TOO_LARGE' } });
    expect((await call('POST', '/v1/sandboxes', { ref: 'no/such-env' })).status).toBe(404);
  });

  it('reads a symlink to /etc/shadow planted in the sandbox as the sandbox file, never the host one, and `..` cannot leave the root', async () => {
    const id = await create();
    await call('PUT', `/v1/sandboxes/${id}/files?path=/etc/shadow`, undefined, {
      raw: 'sandbox-shadow\n',
      headers: { 'content-type': 'application/octet-stream' },
    });
    await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'ln -s /etc/shadow /tmp/link && ln -s ../../../../../../etc/shadow /tmp/rel' });
    for (const p of ['/tmp/link', '/tmp/rel', '/tmp/../../../../etc/shadow', '/etc/shadow']) {
      const r = await call('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`);
      expect([p, r.status, r.text]).toEqual([p, 200, 'sandbox-shadow\n']);
    }
    // a write through the planted link lands in the sandbox too
    await call('PUT', `/v1/sandboxes/${id}/files?path=/tmp/link`, undefined, { raw: 'changed\n', headers: { 'content-type': 'application/octet-stream' } });
    expect(readFileSync('/etc/shadow', 'utf8')).not.toBe('changed\n');
    expect((await call('GET', `/v1/sandboxes/${id}/files?path=/etc/shadow`)).text).toBe('changed\n');
    await call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('kills a running exec when its client disconnects', async () => {
    const id = await create();
    const marker = sleepMarker();
    const sleeping = (): boolean => sleepRuns(marker);
    const abort = new AbortController();
    const pending = call('POST', `/v1/sandboxes/${id}/exec`, { command: `exec sleep ${marker}` }, { signal: abort.signal }).catch((e: unknown) => e);
    await eventually(sleeping);
    abort.abort();
    expect(await pending).toBeInstanceOf(Error);
    await eventually(() => !sleeping());
    expect((await call('GET', `/v1/sandboxes/${id}`)).status).toBe(200);
    await call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('destroys a sandbox when its TTL passes', async () => {
    const id = await create({ ttl: 1 });
    await eventually(async () => (await call('GET', `/v1/sandboxes/${id}`)).status === 404);
    await eventually(() => !existsSync(join(store.sandboxesDir, id)));
    expect(logLines.map((l) => JSON.parse(l) as Record<string, unknown>)).toContainEqual(expect.objectContaining({ event: 'reaped', sandbox: id, why: 'ttl' }));
  });

  it('refuses a create beyond --max-sandboxes with 429 and Retry-After, and frees the slot when the idle timeout ends a sandbox', async () => {
    const small = await fx.serve({ maxSandboxes: 1, idleTimeoutMs: 1500 });
    const first = await create({}, small);
    const over = await call('POST', '/v1/sandboxes', { ref: 'srv/busybox' }, { server: small });
    expect(over.status).toBe(429);
    expect(over.json()).toMatchObject({ error: { code: 'CAPACITY' } });
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // a fork beyond the cap is reported per child, not as a failed request
    expect((await call('POST', `/v1/sandboxes/${first}/fork`, { count: 1 }, { server: small })).json()).toMatchObject({
      children: [{ error: { code: 'CAPACITY' } }],
    });
    await eventually(async () => (await call('GET', `/v1/sandboxes/${first}`, undefined, { server: small })).status === 404);
    expect(logLines.map((l) => JSON.parse(l) as Record<string, unknown>)).toContainEqual(
      expect.objectContaining({ event: 'reaped', sandbox: first, why: 'idle' }),
    );
    const second = await create({}, small);
    await call('DELETE', `/v1/sandboxes/${second}`, undefined, { server: small });
  });
});
