/**
 * What a client sees of the bounds on what the server holds: a file read streams within the size
 * limit (a regular file over it is refused up front; a device breaks off at it), an upload over
 * it is refused with nothing written, a zip whose data turns out corrupt is a BadZipFile, and past
 * the memory budget output is truncated saying so (each command's first 64 KiB never is) while
 * JSON bodies and SWE-ReX file reads are refused with 429 and a Retry-After until it frees up.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { get } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import type { RunningServer } from './serve.js';

const KiB = 1 << 10;
const MiB = 1 << 20;
const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

/** A GET's body read to its end or its break, counted. */
function readAll(server: RunningServer, path: string): Promise<{ status: number; bytes: number; whole: boolean }> {
  return new Promise((resolve, reject) => {
    const req = get(`${server.url}${path}`, { headers: { authorization: `Bearer ${fx.token}` } }, (res) => {
      let bytes = 0;
      let whole = false;
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () => (whole = true));
      res.on('error', () => undefined);
      res.on('close', () => resolve({ status: res.statusCode ?? 0, bytes, whole }));
    });
    req.on('error', reject);
  });
}

async function sh(server: RunningServer, id: string, command: string): Promise<Record<string, unknown>> {
  const r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command, max_output: '4m' }, { server });
  expect(r.status, r.text.slice(0, 300)).toBe(200);
  return r.json();
}

/** The server's memory budget held now, from /metrics. */
async function held(server: RunningServer): Promise<number> {
  const m = (await fx.call('GET', '/metrics', undefined, { server })).text;
  return Number(/^minisandbox_memory_held_bytes (\d+)$/m.exec(m)?.[1]);
}

describe('file bodies within the size limit', () => {
  it('streams a read: a regular file over the limit is refused before a byte goes out, a device breaks off at the limit', async () => {
    const small = await fx.serveWithLimits({ fileLimit: MiB });
    const id = await fx.create({ ref: 'srv/busybox' }, small);
    await sh(small, id, `mkdir /work && head -c ${MiB} /dev/zero > /work/limit && head -c ${MiB + 1} /dev/zero > /work/over && : > /work/empty`);
    expect(await readAll(small, `/v1/sandboxes/${id}/files?path=/work/limit`)).toEqual({ status: 200, bytes: MiB, whole: true });
    expect(await readAll(small, `/v1/sandboxes/${id}/files?path=/work/empty`)).toEqual({ status: 200, bytes: 0, whole: true });
    const over = await fx.call('GET', `/v1/sandboxes/${id}/files?path=/work/over`, undefined, { server: small });
    expect([over.status, over.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT', message: expect.stringContaining(`larger than ${MiB}`) } }]);
    for (const path of ['/work', '/work/missing']) {
      const r = await fx.call('GET', `/v1/sandboxes/${id}/files?path=${path}`, undefined, { server: small });
      expect([path, r.status, r.json()]).toMatchObject([path, 404, { error: { code: 'SANDBOX_FILE' } }]);
    }
    // a device has no size to refuse up front: the transfer breaks off, never looking whole
    const zero = await readAll(small, `/v1/sandboxes/${id}/files?path=/dev/zero`);
    expect(zero).toMatchObject({ status: 200, whole: false });
    expect(zero.bytes).toBeLessThanOrEqual(MiB);
    // nothing is left running in the sandbox
    expect((await sh(small, id, 'ps -o comm | grep -c cat || true')).stdout).toBe('0\n');
  });

  it('refuses an upload over the limit, declared or streamed, writing nothing', async () => {
    const small = await fx.serveWithLimits({ fileLimit: MiB });
    const id = await fx.create({ ref: 'srv/busybox' }, small);
    const big = Buffer.alloc(MiB + 1, 'z');
    const declared = await fx.call('PUT', `/v1/sandboxes/${id}/files?path=/work/a.bin`, undefined, {
      server: small,
      raw: big,
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect([declared.status, declared.json()]).toMatchObject([413, { error: { code: 'BODY_TOO_LARGE' } }]);
    // without a content-length: counted as it arrives
    const r = await fetch(`${small.url}/v1/sandboxes/${id}/files?path=/work/b.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${fx.token}`, 'content-type': 'application/octet-stream' },
      body: new Blob([big]).stream(),
      duplex: 'half',
    } as RequestInit);
    expect([r.status, ((await r.json()) as { error: { code: string } }).error.code]).toEqual([413, 'BODY_TOO_LARGE']);
    expect((await sh(small, id, 'ls /work 2>&1; true')).stdout).toContain('No such file');
    const fits = await fx.call('PUT', `/v1/sandboxes/${id}/files?path=/work/c.bin&mode=640`, undefined, {
      server: small,
      raw: big.subarray(0, MiB),
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(fits.status, fits.text).toBe(204);
    expect((await sh(small, id, 'stat -c "%s %a" /work/c.bin')).stdout).toBe(`${MiB} 640\n`);
  });

  it('answers a zip whose data is corrupt with BadZipFile, and one that inflates past the limit with 413', async () => {
    const small = await fx.serveWithLimits({ fileLimit: MiB });
    const id = await fx.create({ ref: 'srv/busybox' }, small);
    const zip = (name: string, script: string): Buffer => {
      const file = join(fx.work, name);
      execFileSync('python3', ['-c', `import zipfile,sys\nwith zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:\n${script}`, file]);
      return readFileSync(file);
    };
    const upload = async (bytes: Buffer): Promise<{ status: number; body: Record<string, unknown> }> => {
      const form = new FormData();
      form.append('file', new Blob([Uint8Array.from(bytes)]), 'zipped_transfer.zip');
      form.append('target_path', '/work/up');
      form.append('unzip', 'true');
      const r = await fetch(`${small.url}/swerex/${id}/upload`, { method: 'POST', headers: { 'x-api-key': fx.token }, body: form });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };
    const tooBig = zip('big.zip', `  z.writestr("a.bin", bytes(${MiB}))\n  z.writestr("b.bin", bytes(1))`);
    expect(await upload(tooBig)).toMatchObject({ status: 413, body: { error: { code: 'BODY_TOO_LARGE' } } });
    expect((await sh(small, id, 'ls /work 2>&1; true')).stdout).toContain('No such file');
    // the second entry's deflate data spoiled in its middle (its names and sizes check out)
    const good = zip('two.zip', '  z.writestr("one.txt", "first\\n")\n  z.writestr("two.bin", bytes(range(256)) * 2000)');
    const at = good.indexOf('two.bin') + 'two.bin'.length + 200;
    const bad = Buffer.from(good);
    bad.fill(0xff, at, at + 64);
    expect(await upload(bad)).toMatchObject({ status: 511, body: { swerexception: { class_path: 'zipfile.BadZipFile' } } });
    expect(await upload(good)).toMatchObject({ status: 200, body: {} });
    expect((await sh(small, id, 'cat /work/up/one.txt && wc -c < /work/up/two.bin')).stdout).toBe('first\n512000\n');
  });
});

describe('the memory budget', () => {
  it("truncates output past it saying so, keeps each command's first 64 KiB, and refuses large bodies and reads until it frees up", async () => {
    const tight = await fx.serveWithLimits({ fileLimit: 8 * MiB, memory: { budgetBytes: MiB, maxOutputBytes: 4 * MiB } });
    const id = await fx.create({ ref: 'srv/busybox' }, tight);
    const alone = await sh(tight, id, 'head -c 3m /dev/zero | tr "\\0" x');
    expect(alone).toMatchObject({ stdout_truncated: true, truncated_by: 'server_budget' });
    // output costs the budget twice its size (its bytes, then its text), past the first 64 KiB
    expect((alone.stdout as string).length).toBeGreaterThan(MiB / 4);
    expect((alone.stdout as string).length).toBeLessThanOrEqual(MiB / 2 + 64 * KiB);
    // what max_output cuts says so too
    const capped = (await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'head -c 3000 /dev/zero', max_output: 100 }, { server: tight })).json();
    expect(capped).toMatchObject({ stdout_truncated: true, truncated_by: 'max_output' });
    await eventually(async () => (await held(tight)) === 0);

    // one command holds the whole budget while it runs
    const marker = sleepMarker();
    const abort = new AbortController();
    const hog = fx
      .call(
        'POST',
        `/v1/sandboxes/${id}/exec`,
        { command: `head -c 3m /dev/zero | tr "\\0" x; sleep ${marker}`, max_output: '4m' },
        { server: tight, signal: abort.signal },
      )
      .catch((e: unknown) => e);
    await eventually(() => sleepRuns(marker));
    await eventually(async () => (await held(tight)) > MiB - 256 * KiB);
    // a small command is not cut: its first 64 KiB per stream are its own
    const smallOut = await sh(tight, id, 'head -c 40000 /dev/zero | tr "\\0" y; head -c 30000 /dev/zero | tr "\\0" z >&2');
    expect(smallOut).toMatchObject({ stdout_truncated: false, stderr_truncated: false });
    expect([(smallOut.stdout as string).length, (smallOut.stderr as string).length]).toEqual([40000, 30000]);
    // a JSON body past the floor, and a file read whole for SWE-ReX, wait for the budget
    await sh(tight, id, 'head -c 300000 /dev/zero | tr "\\0" r > /root/r.txt');
    const content = 'w'.repeat(200 * KiB);
    for (const [route, body] of [
      ['write_file', { path: '/root/w.txt', content }],
      ['read_file', { path: '/root/r.txt' }],
    ] as const) {
      const r = await fx.call('POST', `/swerex/${id}/${route}`, body, { server: tight });
      expect([route, r.status, r.json()]).toMatchObject([route, 429, { error: { code: 'CAPACITY', message: expect.stringContaining('memory budget') } }]);
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    abort.abort();
    await hog;
    await eventually(async () => (await held(tight)) === 0);
    expect((await fx.call('POST', `/swerex/${id}/write_file`, { path: '/root/w.txt', content }, { server: tight })).status).toBe(200);
    const read = await fx.call('POST', `/swerex/${id}/read_file`, { path: '/root/r.txt' }, { server: tight });
    expect([read.status, (read.json().content as string).length]).toEqual([200, 300000]);
    const metrics = (await fx.call('GET', '/metrics', undefined, { server: tight })).text;
    expect(Number(/^minisandbox_memory_refusals_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0);
    expect(metrics).toContain(`minisandbox_memory_budget_bytes ${MiB}`);
  });
});
