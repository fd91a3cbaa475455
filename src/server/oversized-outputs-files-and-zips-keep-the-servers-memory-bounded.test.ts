/**
 * Small requests that used to cost the `serve` process gigabytes, each against a real serve
 * process whose peak RSS (VmHWM) is compared to a bound: execs whose output floods in, files GETs
 * of /dev/zero, a large file PUT, and SWE-ReX uploads of a small zip that inflates to near the
 * size limit. Output is captured within the server's memory budget, truncated
 * past it and said so; file bodies and archives stream through bounded buffers.
 */
import { readFileSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { zipBomb } from '../../test/helpers/flood.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { ServeProcess } from '../../test/helpers/serve-process.js';

const MiB = 1 << 20;
const BUDGET = 64 * MiB;
const MAX_OUTPUT = 32 * MiB;
const LIMIT_FLAGS = ['--memory-budget', '64m', '--max-output', '32m'];
/**
 * What the floods may add to the peak of a warmed-up server: the budget's bytes in a few copies
 * (the captured chunks, their text, a body's parsed form) and the streams' buffers. Before these
 * bounds, floods like these (somewhat larger) took the server 0.65 to 5.5 GB over its warm peak.
 */
const ALLOWANCE = 4 * BUDGET;

const fx = new ServerFixture();
let zipFile = '';

let srv: ServeProcess;
/** The server's peak once warmed up (sandboxes made, a command run in each): its working size. */
let warm = 0;
let ids: string[] = [];

beforeAll(async () => {
  await fx.pushBusybox(fx.reg, 'mem/busybox');
  // 240 MiB of zeros in one deflated entry: a zip of about 240 KB
  zipFile = join(fx.work, 'bomb.zip');
  zipBomb(zipFile, 240);
  // one server for every flood here: each test bounds its peak so far, the floods before included
  srv = await ServeProcess.start(fx, LIMIT_FLAGS);
  ids = await Promise.all(Array.from({ length: 4 }, () => srv.create('mem/busybox')));
  for (const id of ids) expect((await srv.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'echo warm' })).json()).toMatchObject({ stdout: 'warm\n' });
  warm = srv.peakRss();
}, 120_000);
afterAll(async () => {
  await srv?.stop();
  await fx.tearDown();
});

/** Reads the first `upTo` bytes of a response body (keeping none), then hangs up. */
function readSome(srv: ServeProcess, path: string, upTo: number): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = get(`${srv.url}${path}`, { headers: { authorization: `Bearer ${srv.token}` } }, (res) => {
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        if (bytes >= upTo) {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, bytes });
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
    });
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)));
  });
}

function mb(n: number): string {
  return `${(n / MiB).toFixed(0)} MiB`;
}

describe("the server's memory under oversized requests", () => {
  it('refuses max_output past --max-output, and captures execs flooding at once within the budget, saying which it cut', async () => {
    const r = await srv.call('POST', `/v1/sandboxes/${ids[0]}/exec`, { command: 'true', max_output: '1g' });
    expect([r.status, r.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT', field: 'max_output' } }]);
    expect((r.json().error as { message: string }).message).toContain(String(MAX_OUTPUT));
    const ses = await srv.call('POST', `/v1/sandboxes/${ids[0]}/sessions`, {});
    const run = await srv.call('POST', `/v1/sandboxes/${ids[0]}/sessions/${ses.json().session as string}/run`, {
      command: 'true',
      max_output: 2 * MAX_OUTPUT,
    });
    expect([run.status, run.json()]).toMatchObject([422, { error: { field: 'max_output' } }]);
    // each asks for the most it may and prints 48 MiB: together twice the budget at the ceiling
    const flood = ids.map((id) =>
      srv.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c 48m', max_output: MAX_OUTPUT }),
    );
    const bodies = (await Promise.all(flood)).map((r) => {
      expect(r.status, r.text.slice(0, 300)).toBe(200);
      return r.json();
    });
    const peak = srv.peakRss();
    expect(peak - warm, `peak ${mb(peak)} after a warm ${mb(warm)}`).toBeLessThan(ALLOWANCE);
    for (const b of bodies) expect(b).toMatchObject({ outcome: 'ok', exit_code: 0, stdout_truncated: true });
    const kept = bodies.reduce((n, b) => n + (b.stdout as string).length, 0);
    // output costs the budget twice its size (bytes, then text), past each stream's first 64 KiB
    expect(kept).toBeLessThanOrEqual(BUDGET / 2 + ids.length * (64 << 10));
    // the budget cut some of them short of their max_output, and those say so
    const cut = bodies.filter((b) => b.truncated_by === 'server_budget');
    expect(cut.length).toBeGreaterThan(0);
    for (const b of cut) expect((b.stdout as string).length).toBeLessThan(MAX_OUTPUT);
    for (const b of bodies.filter((x) => x.truncated_by !== 'server_budget')) expect(b).toMatchObject({ truncated_by: 'max_output' });
  });

  it('streams a files GET of /dev/zero, twelve at once, from its first bytes at the pace the client reads', async () => {
    // held whole, each read was the size limit (256 MiB) before its first byte went out
    const reads = await Promise.all(Array.from({ length: 12 }, (_, i) => readSome(srv, `/v1/sandboxes/${ids[i % ids.length]}/files?path=/dev/zero`, 8 * MiB)));
    const peak = srv.peakRss();
    expect(peak - warm, `peak ${mb(peak)} after a warm ${mb(warm)}`).toBeLessThan(ALLOWANCE);
    for (const r of reads) expect(r).toEqual({ status: 200, bytes: expect.any(Number) });
    for (const r of reads) expect(r.bytes).toBeGreaterThanOrEqual(8 * MiB);
    // the reads whose clients let go ended: the sandboxes answer as ever
    for (const id of ids) expect((await srv.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'echo still' })).json()).toMatchObject({ stdout: 'still\n' });
  });

  it('streams a large file PUT into the sandbox, and a SWE-ReX upload of a zip that inflates to near the size limit', async () => {
    const body = Buffer.alloc(96 * MiB, 'y');
    const put = await srv.call('PUT', `/v1/sandboxes/${ids[0]}/files?path=/work/big.bin`, undefined, {
      raw: body,
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(put.status, put.text).toBe(204);
    const zip = readFileSync(zipFile);
    expect(zip.length).toBeLessThan(MiB);
    const uploads = await Promise.all(
      ids.slice(0, 1).map((id) => {
        const form = new FormData();
        form.append('file', new Blob([zip]), 'zipped_transfer.zip');
        form.append('target_path', '/work/unzipped');
        form.append('unzip', 'true');
        return srv.call('POST', `/swerex/${id}/upload`, undefined, { raw: form, headers: { 'x-api-key': srv.token } });
      }),
    );
    for (const u of uploads) expect([u.status, u.text]).toEqual([200, '{}']);
    const peak = srv.peakRss();
    expect(peak - warm, `peak ${mb(peak)} after a warm ${mb(warm)}`).toBeLessThan(ALLOWANCE);
    const check = await srv.call('POST', `/v1/sandboxes/${ids[0]}/exec`, { command: 'wc -c < /work/big.bin; wc -c < /work/unzipped/zeros.bin' });
    expect(check.json()).toMatchObject({ stdout: `${96 * MiB}\n${240 * MiB}\n` });
  });
});
