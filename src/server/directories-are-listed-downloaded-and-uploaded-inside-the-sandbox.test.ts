/**
 * Directory listing, tar download and tar upload over real HTTP into real sandboxes: every path
 * resolves in the sandbox's root (a planted symlink to /etc/shadow is the sandbox's link, never the
 * host's file), an upload cannot write outside its target, and uploads are size-limited.
 */
import { request } from 'node:http';
import { copyFileSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { extract } from 'tar-stream';
import { type RawTarEntry, tarOf } from '../../test/helpers/oci-layout.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

interface TarEntry {
  name: string;
  type: string;
  linkname?: string;
  mode: number;
  data: string;
}

async function untar(bytes: Buffer): Promise<TarEntry[]> {
  const out: TarEntry[] = [];
  const ex = extract();
  const finished = new Promise<void>((resolve, reject) => {
    ex.on('finish', resolve);
    ex.on('error', reject);
  });
  ex.on('entry', (h, body, next) => {
    const chunks: Buffer[] = [];
    body.on('data', (c: unknown) => void chunks.push(c as Buffer));
    body.on('end', () => {
      out.push({
        name: h.name,
        type: h.type ?? 'file',
        ...(h.linkname ? { linkname: h.linkname } : {}),
        mode: h.mode ?? 0,
        data: Buffer.concat(chunks).toString('utf8'),
      });
      next();
    });
  });
  ex.end(bytes);
  await finished;
  return out;
}

const TAR = { 'content-type': 'application/x-tar' };

async function sh(id: string, command: string): Promise<string> {
  const r = (await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command })).json();
  expect(r, command).toMatchObject({ exit_code: 0 });
  return r.stdout as string;
}

describe('directories in the sandbox', () => {
  it('lists a directory with names, types, sizes and modes; a planted symlink to /etc/shadow is the sandbox link and its target the sandbox file', async () => {
    const id = await fx.create();
    await sh(
      id,
      'mkdir -p /work/d/sub && printf 12345 > /work/d/f.txt && chmod 640 /work/d/f.txt && printf sandbox-shadow > /etc/shadow && ' +
        'ln -s /etc/shadow /work/d/shadow && ln -s /etc /work/etc-link && touch "/work/d/two words" "/work/d/.hidden"',
    );
    const r = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/work/d`);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({
      path: '/work/d',
      entries: [
        { name: '.hidden', type: 'file', size: 0, mode: '644' },
        { name: 'f.txt', type: 'file', size: 5, mode: '640' },
        { name: 'shadow', type: 'symlink', size: '/etc/shadow'.length, mode: '777', target: '/etc/shadow' },
        { name: 'sub', type: 'dir', size: expect.any(Number), mode: '755' },
        { name: 'two words', type: 'file', size: 0, mode: '644' },
      ],
    });
    // a directory reached through a symlink to /etc is the sandbox's /etc
    const etc = (await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/work/etc-link`)).json().entries as Array<{ name: string; size: number }>;
    expect(etc.find((e) => e.name === 'shadow')).toMatchObject({ size: 'sandbox-shadow'.length });
    const empty = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/work/d/sub`);
    expect(empty.json()).toEqual({ path: '/work/d/sub', entries: [] });
    const missing = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/nope`);
    expect([missing.status, missing.json()]).toMatchObject([404, { error: { code: 'SANDBOX_FILE' } }]);
    const rel = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=work`);
    expect([rel.status, rel.json()]).toMatchObject([422, { error: { field: 'path' } }]);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('downloads a directory as a tar of the sandbox files, links as links, never the host /etc/shadow', async () => {
    const id = await fx.create();
    await sh(
      id,
      'mkdir -p /work/t/sub && printf hi > /work/t/sub/a.txt && chmod 600 /work/t/sub/a.txt && printf sandbox-shadow > /etc/shadow && ' +
        'ln -s /etc/shadow /work/t/shadow && ln -s /etc /work/etc-link',
    );
    const r = await fx.call('GET', `/v1/sandboxes/${id}/tar?path=/work/t`);
    expect(r.status, r.text).toBe(200);
    expect(r.headers.get('content-type')).toBe('application/x-tar');
    const entries = await untar(r.bytes);
    const byName = new Map(entries.map((e) => [e.name.replace(/^\.\//, '').replace(/\/$/, ''), e]));
    expect(byName.get('sub/a.txt')).toMatchObject({ type: 'file', data: 'hi', mode: 0o600 });
    expect(byName.get('shadow')).toMatchObject({ type: 'symlink', linkname: '/etc/shadow', data: '' });
    // the sandbox's /etc through a link: its shadow is the sandbox's
    const etc = await untar((await fx.call('GET', `/v1/sandboxes/${id}/tar?path=/work/etc-link`)).bytes);
    expect(etc.find((e) => e.name.replace(/^\.\//, '') === 'shadow')).toMatchObject({ data: 'sandbox-shadow' });
    const hostShadow = readFileSync('/etc/shadow');
    expect(hostShadow.length).toBeGreaterThan(0);
    expect(etc.some((e) => e.data.includes(hostShadow.toString('utf8')))).toBe(false);
    const missing = await fx.call('GET', `/v1/sandboxes/${id}/tar?path=/nope`);
    expect([missing.status, missing.json()]).toMatchObject([404, { error: { code: 'SANDBOX_FILE' } }]);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('streams a large download at the client pace, and ends the tar when the client goes away mid-download', async () => {
    const id = await fx.create({ ref: 'srv/busybox', limits: { disk: '512m' } });
    await sh(id, 'mkdir -p /work/big && dd if=/dev/urandom of=/work/big/blob bs=1M count=48 2>/dev/null');
    const abort = new AbortController();
    const res = await fetch(`${fx.srv.url}/v1/sandboxes/${id}/tar?path=/work/big`, {
      headers: { authorization: `Bearer ${fx.token}` },
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    // the tar runs while the download is open: the sandbox is in use
    expect((await fx.call('GET', `/v1/sandboxes/${id}`)).json()).toMatchObject({ idle_since: null });
    // 48 MiB cannot all sit in pipes and socket buffers: a tar not ended with its client would block, busy, for ever
    abort.abort();
    await eventually(async () => (await fx.call('GET', `/v1/sandboxes/${id}`)).json().idle_since !== null);
    // a whole download still works, and is the whole file
    const whole = await fx.call('GET', `/v1/sandboxes/${id}/tar?path=/work/big`);
    expect(whole.bytes.length).toBeGreaterThan(48 << 20);
    expect(await sh(id, 'cd /work/big && wc -c < blob')).toBe(`${48 << 20}\n`);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it(
    'uploads a tar into a directory (made if missing) and round-trips it; ../, absolute names and writes through ' +
      'the archive own symlinks are refused and write nothing outside',
    async () => {
      const id = await fx.create();
      const good = await tarOf([
        { name: 'top.txt', data: 'top', mode: 0o640 },
        { name: 'dir/', type: 'directory', mode: 0o750 },
        { name: 'dir/inner.sh', data: 'echo inner', mode: 0o755 },
        { name: 'ln', type: 'symlink', linkname: 'dir/inner.sh' },
      ]);
      const up = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/up/here`, undefined, { raw: good, headers: TAR });
      expect(up.status, up.text).toBe(204);
      expect(await sh(id, 'cd /work/up/here && cat top.txt && sh ln && stat -c "%a %n" top.txt dir dir/inner.sh')).toBe(
        'topinner\n640 top.txt\n750 dir\n755 dir/inner.sh\n',
      );
      const back = await untar((await fx.call('GET', `/v1/sandboxes/${id}/tar?path=/work/up/here`)).bytes);
      expect(back.map((e) => e.name.replace(/^\.\//, '').replace(/\/$/, '')).sort()).toEqual(['', 'dir', 'dir/inner.sh', 'ln', 'top.txt']);

      await sh(id, 'mkdir -p /work/target');
      const attacks: RawTarEntry[][] = [
        [
          { name: 'ok.txt', data: 'ok' },
          { name: '../escape.txt', data: 'x' },
        ],
        [{ name: 'sub/../../escape.txt', data: 'x' }],
        [{ name: '/work/escape.txt', data: 'x' }],
        [
          { name: 'up', type: 'symlink', linkname: '..' },
          { name: 'up/escape.txt', data: 'x' },
        ],
        [{ name: 'hard', type: 'link', linkname: '../outside' }],
        [{ name: 'dev', type: 'character-device', devmajor: 1, devminor: 3 }],
      ];
      for (const entries of attacks) {
        const r = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/target`, undefined, { raw: await tarOf(entries), headers: TAR });
        expect([entries.map((e) => e.name), r.status, r.json()]).toMatchObject([entries.map((e) => e.name), 422, { error: { code: 'UNSAFE_PATH' } }]);
      }
      // nothing landed outside the target (an entry before the refused one may be inside it)
      expect(await sh(id, 'ls -A /work; find / -xdev -name escape.txt -o -xdev -name outside')).toBe('target\nup\n');
      const notTar = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/target`, undefined, { raw: 'x'.repeat(1000), headers: TAR });
      expect([notTar.status, notTar.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT' } }]);
      const json = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/target`, { a: 1 });
      expect([json.status, json.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT' } }]);
      await fx.call('DELETE', `/v1/sandboxes/${id}`);
    },
  );

  it('answers 413 for a tar over the limit (declared or streamed), and says so when the environment has no tar', async () => {
    const small = await fx.serveWithLimits({ fileLimit: 64 << 10 });
    const id = await fx.create({ ref: 'srv/busybox' }, small);
    const big = await tarOf([{ name: 'big.bin', data: 'y'.repeat(100 << 10) }]);
    const declared = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/big`, undefined, { server: small, raw: big, headers: TAR });
    expect([declared.status, declared.json()]).toMatchObject([413, { error: { code: 'BODY_TOO_LARGE' } }]);
    // chunked: no length up front, counted as it arrives
    const streamed = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${small.url}/v1/sandboxes/${id}/tar?path=/work/big`, {
        method: 'PUT',
        headers: { ...TAR, authorization: `Bearer ${fx.token}`, 'transfer-encoding': 'chunked' },
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (c: Buffer) => {
          body += c.toString('utf8');
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      Readable.from([big.subarray(0, 50_000), big.subarray(50_000)]).pipe(req);
    });
    expect([streamed.status, JSON.parse(streamed.body)]).toMatchObject([413, { error: { code: 'BODY_TOO_LARGE' } }]);
    await fx.call('DELETE', `/v1/sandboxes/${id}`, undefined, { server: small });
    // busybox's shell finds its tar applet anyway: an environment whose shell is dash and has no tar
    await fx.pushBusybox(fx.reg, 'srv/no-tar', {}, (root) => {
      for (const [from, to] of [
        ['/bin/dash', 'bin/sh'],
        ['/lib/x86_64-linux-gnu/libc.so.6', 'lib/x86_64-linux-gnu/libc.so.6'],
        ['/lib64/ld-linux-x86-64.so.2', 'lib64/ld-linux-x86-64.so.2'],
      ] as const) {
        mkdirSync(dirname(join(root, to)), { recursive: true });
        rmSync(join(root, to), { force: true });
        copyFileSync(from, join(root, to));
      }
      rmSync(join(root, 'bin/tar'));
    });
    const noTarId = await fx.create({ ref: 'srv/no-tar' }, small);
    expect((await fx.call('POST', `/v1/sandboxes/${noTarId}/exec`, { command: 'command -v tar || echo none' }, { server: small })).json()).toMatchObject({
      stdout: 'none\n',
    });
    const noTar = await fx.call('GET', `/v1/sandboxes/${noTarId}/tar?path=/root`, undefined, { server: small });
    expect([noTar.status, noTar.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT', message: expect.stringContaining('no tar') } }]);
    const noTarUp = await fx.call('PUT', `/v1/sandboxes/${noTarId}/tar?path=/root`, undefined, {
      server: small,
      raw: await tarOf([{ name: 'a', data: 'a' }]),
      headers: TAR,
    });
    expect([noTarUp.status, noTarUp.json()]).toMatchObject([422, { error: { message: expect.stringContaining('no tar') } }]);
  });
});
