/**
 * `serve` killed with SIGKILL while it works leaves work behind; the next `serve` on the store
 * reaps all of it at start and nothing else: a snapshot killed mid-capture (its push spool and its
 * marker), one killed after its layer reached the snapshots' registry but before its record (the
 * ref and packs the API could neither list nor delete and gc kept), a tar upload's spool. The
 * snapshot whose record was written stays listed, usable and deletable.
 *
 * The kills land at those points whatever the machine's speed: one snapshot's lay-out waits for a
 * layer lock this test holds (as a concurrent pull of that layer would), another's capture reads
 * a sparse file of a terabyte (hours of hashing), and the upload's body is never finished.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { digestHex } from '../cas/digest.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { pushTree } from '../publish/push.js';
import { StorePaths } from '../store/paths.js';
import { ownerOfName } from '../util/owned-name.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-serve-killed-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const snapDir = join(store.root, 'snapshots');
const snapReg = new LocalRegistry(join(snapDir, 'registry'));

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: 'killed/busybox' });
}, 120_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

const spawned: ChildProcess[] = [];
afterAll(() => {
  for (const p of spawned) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

interface Server {
  proc: ChildProcess;
  url: string;
  headers: Record<string, string>;
}

async function serve(): Promise<Server> {
  const proc = spawn(BIN, ['--registry', reg.root, '--store', store.root, 'serve', '--listen', '127.0.0.1:0', '--token-file', join(work, 'token')], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  spawned.push(proc);
  // the first line comes once the start's reaping is done
  const line = await new Promise<string>((r) => createInterface({ input: proc.stdout! }).once('line', r));
  const { listening } = JSON.parse(line) as { listening: string };
  const token = readFileSync(join(work, 'token'), 'utf8').trim();
  return { proc, url: listening, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } };
}

async function post(s: Server, path: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(`${s.url}${path}`, { method: 'POST', headers: s.headers, body: JSON.stringify(body) });
  const json = (await r.json()) as Record<string, unknown>;
  if (r.status >= 300) throw new Error(`${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
}

async function sh(s: Server, id: string, command: string): Promise<string> {
  const r = await post(s, `/v1/sandboxes/${id}/exec`, { command });
  expect(r, `${command}: ${JSON.stringify(r)}`).toMatchObject({ exit_code: 0 });
  return r.stdout as string;
}

const snapshotIdsOn = async (r: LocalRegistry): Promise<string[]> => {
  const out: string[] = [];
  for await (const ref of r.listRefs()) if (ref.name.startsWith('snapshots/')) out.push(ref.name.slice('snapshots/'.length));
  return out.sort();
};
const markers = (): string[] => readdirSync(snapDir).filter((n) => n.endsWith('.taking'));
const ownedBy = (pid: number): string[] =>
  [...readdirSync(store.tmpDir), ...readdirSync(store.layersDir)].filter((n) =>
    ['push-', 'tar-upload-', 'w-', 'stage-', 'link-', 'copy-', '.tmp-'].some((p) => ownerOfName(n, p)?.pid === pid),
  );

describe('a serve killed with -9', () => {
  it('leaves nothing its successor does not reap at start, and a snapshot with a record stays', async () => {
    const a = await serve();
    const pidA = a.proc.pid!;
    const exitedA = new Promise((r) => a.proc.on('exit', r));
    const s1 = (await post(a, '/v1/sandboxes', { ref: 'killed/busybox' })).id as string;
    const s2 = (await post(a, '/v1/sandboxes', { ref: 'killed/busybox' })).id as string;
    await sh(a, s1, 'echo kept > /kept.txt');
    const complete = (await post(a, `/v1/sandboxes/${s1}/snapshot`, {})).snapshot as string;

    // 1. a snapshot past its upload, before its record: its lay-out waits for the busybox layer,
    // moved aside, whose lock this (live) process holds
    const busybox = digestHex((await resolveEnv(reg, 'killed/busybox')).config.layers[0]!.digest);
    const laidOut = readdirSync(store.layersDir).filter((n) => n.split('+')[0] === busybox && !n.endsWith('.lock'));
    expect(laidOut.length).toBeGreaterThan(0);
    for (const n of laidOut) {
      renameSync(join(store.layersDir, n), join(work, `aside-${n}`));
      writeFileSync(join(store.layersDir, `${n}.lock`), `${process.pid}\n`);
    }
    await sh(a, s1, 'echo more > /more.txt');
    const uploaded = post(a, `/v1/sandboxes/${s1}/snapshot`, {}).catch(() => undefined);
    await eventually(async () => (await snapshotIdsOn(snapReg)).length === 2);
    const halfMade = (await snapshotIdsOn(snapReg)).find((id) => id !== complete)!;

    // 2. a tar upload whose body is still arriving: its spool made
    const upload = request(`${a.url}/v1/sandboxes/${s1}/tar?path=/up`, {
      method: 'PUT',
      headers: { ...a.headers, 'content-type': 'application/x-tar', 'content-length': String(1 << 20) },
    });
    upload.on('error', () => undefined);
    upload.write(Buffer.alloc(64 << 10));
    await eventually(() => readdirSync(store.tmpDir).some((n) => ownerOfName(n, 'tar-upload-')?.pid === pidA));

    // 3. a snapshot mid-capture: its push spool made (the first's gone), a terabyte of holes being
    // read; the last step, since hashing them may take the server's main thread
    const pushSpools = (): boolean => readdirSync(store.tmpDir).some((n) => ownerOfName(n, 'push-')?.pid === pidA);
    await eventually(() => !pushSpools());
    await sh(a, s2, 'truncate -s 1099511627776 /holes');
    const capturing = post(a, `/v1/sandboxes/${s2}/snapshot`, {}).catch(() => undefined);
    await eventually(() => markers().length === 2 && pushSpools());

    a.proc.kill('SIGKILL');
    await exitedA;
    await Promise.all([capturing, uploaded]);
    upload.destroy();
    // what the killed server left: spools, markers, the half-made snapshot's ref
    expect(ownedBy(pidA).map((n) => n.split(/\d/)[0])).toEqual(expect.arrayContaining(['push-', 'tar-upload-']));
    expect(markers()).toHaveLength(2);
    expect(markers()).toContain(`${halfMade}.taking`);
    for (const n of laidOut) {
      rmSync(join(store.layersDir, `${n}.lock`));
      renameSync(join(work, `aside-${n}`), join(store.layersDir, n));
    }

    const b = await serve();
    try {
      expect(ownedBy(pidA)).toEqual([]);
      expect(markers()).toEqual([]);
      expect(readdirSync(snapDir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
      expect(await snapshotIdsOn(snapReg)).toEqual([complete]);
      expect(readdirSync(store.refsDir).filter((n) => n.startsWith('snapshots%'))).toEqual([`snapshots%${complete}`]);
      expect(readdirSync(store.sandboxesDir).filter((n) => !n.startsWith('.'))).toEqual([]);
      const listed = (await (await fetch(`${b.url}/v1/snapshots`, { headers: b.headers })).json()) as { snapshots: Array<{ snapshot: string }> };
      expect(listed.snapshots.map((x) => x.snapshot)).toEqual([complete]);
      // the complete one is whole: a sandbox starts from it with what was written, and it deletes
      const from = (await post(b, '/v1/sandboxes', { snapshot: complete })).id as string;
      expect(await sh(b, from, 'cat /kept.txt; test -e /more.txt || echo no-more; test -e /holes || echo no-holes')).toBe('kept\nno-more\nno-holes\n');
      await fetch(`${b.url}/v1/sandboxes/${from}`, { method: 'DELETE', headers: b.headers });
      expect((await fetch(`${b.url}/v1/snapshots/${complete}`, { method: 'DELETE', headers: b.headers })).status).toBe(204);
      expect(existsSync(join(snapDir, `${complete}.json`))).toBe(false);
    } finally {
      b.proc.kill('SIGTERM');
      await new Promise((r) => b.proc.on('exit', r));
    }
  });
});
