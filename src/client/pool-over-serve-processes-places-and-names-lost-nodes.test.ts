/**
 * The TypeScript client against real `minisandbox serve` processes over one registry, each with a
 * store and a node name of its own: the Client's calls and typed errors, a Pool placing each create
 * on the node its environment is warm on, a pushed snapshot restored on the other node, a node
 * stopped with SIGSTOP failing the call in flight with NodeLostError (the monitor) and probed back
 * in after SIGCONT, a node killed with -9 failing its calls with NodeLostError while the pool
 * places on the other, and close() leaving nothing behind. Timings are bounds far above what they
 * take: they catch a call left to its 600 s socket timeout, not a slow machine.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { pushTree } from '../publish/push.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { Client, NodeLostError, Pool, RemoteInvalidInputError, RemoteNotFoundError, TransportError } from './index.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-ts-pool-'));
chmodSync(work, 0o755); // the sandboxes' subordinate ids must reach the stores below it
const regDir = join(work, 'registry');
const tokenFile = join(work, 'token');
const NODES = ['t1', 't2'] as const;
const procs = new Map<string, ChildProcess>();
const urls = new Map<string, string>();

async function startNode(name: string, port = 0): Promise<void> {
  const p = spawn(
    BIN,
    ['--registry', regDir, '--store', join(work, name), 'serve', '--listen', `127.0.0.1:${port}`, '--token-file', tokenFile, '--node-name', name],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const out = p.stdout;
  if (out === null) throw new Error('serve has no stdout');
  const line = await new Promise<string>((r, j) => {
    createInterface({ input: out }).once('line', r);
    p.once('exit', (code) => j(new Error(`serve ${name} exited ${code}`)));
  });
  urls.set(name, (JSON.parse(line) as { listening: string }).listening);
  procs.set(name, p);
}

function stopNode(name: string, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  const p = procs.get(name);
  procs.delete(name);
  if (p === undefined || p.exitCode !== null) return Promise.resolve();
  return new Promise((r) => {
    p.once('exit', () => r());
    p.kill(signal);
  });
}

beforeAll(async () => {
  writeFileSync(tokenFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
  const base = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', base);
  const reg = new LocalRegistry(regDir);
  for (const env of ['env-a', 'env-b']) {
    const root = join(work, `root-${env}`);
    cpSync(base, root, { recursive: true, verbatimSymlinks: true });
    writeFileSync(join(root, 'env'), env);
    await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: `ts/${env}`, config: { workdir: '/root' } });
  }
  await Promise.all(NODES.map((n) => startNode(n)));
}, 120_000);

afterAll(async () => {
  // SIGCONT first: a node left stopped by a failed test would not hear the TERM
  for (const p of procs.values()) p.kill('SIGCONT');
  await Promise.all([...procs.keys()].map((n) => stopNode(n)));
  rmSync(work, { recursive: true, force: true });
});

const url = (n: string): string => urls.get(n) ?? '';

describe('the client of one node', () => {
  it('runs commands, files and sessions, and raises errors typed by the server code', async () => {
    const c = new Client({ baseUrl: url('t1'), tokenFile });
    expect((await c.health()).node).toBe('t1');
    const sb = await c.create({ ref: 'ts/env-a', env: { GREETING: 'hi' } });
    try {
      expect(sb.id).toMatch(/\.t1$/);
      expect(await sb.exec('echo $GREETING; cat /env')).toMatchObject({ stdout: 'hi\nenv-a', exit_code: 0, outcome: 'ok' });
      expect((await sb.exec(['sh', '-c', 'exit 3'])).exit_code).toBe(3);
      await sb.writeFile('/work/run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
      expect(await sb.readText('/work/run.sh')).toBe('#!/bin/sh\necho ran\n');
      expect((await sb.listFiles('/work')).map((e) => [e.name, e.mode])).toEqual([['run.sh', '755']]);
      const s = await sb.session(['cd /work', 'export X=1']);
      expect((await s.run('echo "$X $(pwd)"')).stdout).toBe('1 /work\n');
      const job = await sb.execAsync('/work/run.sh');
      expect((await job.wait()).stdout).toBe('ran\n');
      const [child] = await sb.fork(1, { session: s });
      expect(child !== undefined && 'sandbox' in child && (await child.session?.run('echo "$X $(pwd)"'))?.stdout).toBe('1 /work\n');
      await expect(c.create({ ref: 'ts/env-a', limits: { memory: 'lots' } })).rejects.toMatchObject({
        constructor: RemoteInvalidInputError,
        code: 'INVALID_INPUT',
        field: 'limits.memory',
      });
      await expect(c.info('sb-1-00000000.elsewhere')).rejects.toBeInstanceOf(RemoteNotFoundError);
      // an id of this node from before its server started: lost with that server (410 NODE_RESTARTED)
      await expect(c.info('sb-1-00000000.t1')).rejects.toMatchObject({ constructor: NodeLostError, reason: 'restarted', node: 't1' });
      expect(await c.list()).toHaveLength(2);
      if (child !== undefined && 'sandbox' in child) await child.sandbox.delete();
    } finally {
      await sb.delete();
    }
    expect(await c.list()).toEqual([]);
  });
});

describe('a pool over the nodes', () => {
  it('places each create where its env is warm; a pushed snapshot restores on the other node', async () => {
    const t1 = new Client({ baseUrl: url('t1'), tokenFile });
    const t2 = new Client({ baseUrl: url('t2'), tokenFile });
    expect((await t1.prewarm(['ts/env-a'])).results[0]?.ok).toBe(true);
    expect((await t2.prewarm(['ts/env-b'])).results[0]?.ok).toBe(true);
    const pool = new Pool({ urls: NODES.map(url), tokenFile });
    try {
      const made = await Promise.all(['ts/env-a', 'ts/env-b', 'ts/env-a', 'ts/env-b'].map((ref) => pool.create({ ref })));
      expect(made.map((sb) => sb.id.split('.')[1])).toEqual(['t1', 't2', 't1', 't2']);
      expect(made.map((sb) => sb.client.baseUrl)).toEqual([url('t1'), url('t2'), url('t1'), url('t2')]);
      expect((await pool.get(made[1]?.id ?? '')).client).toBe(made[1]?.client);
      expect((await pool.nodes()).map((n) => [n.node, n.up, n.live])).toEqual([
        ['t1', true, 2],
        ['t2', true, 2],
      ]);

      const a = made[0];
      if (a === undefined) throw new Error('no sandbox');
      await a.exec('mkdir -p /work && echo moved > /work/state && rm /env');
      const snap = await a.snapshot({ push: true, tag: 'snaps/ts-moved' });
      expect(snap.ref).toBe('snaps/ts-moved');
      const b = await pool.create({ snapshotRef: 'snaps/ts-moved', node: 't2' });
      expect(b.id).toMatch(/\.t2$/);
      expect((await b.exec('cat /work/state; test -e /env || echo no-env')).stdout).toBe('moved\nno-env\n');
      // a sandbox of this node, reset over that state: the same id, the pushed files
      const c = made[3];
      if (c === undefined) throw new Error('no sandbox');
      await c.reset({ ref: 'snaps/ts-moved' });
      expect((await c.exec('cat /work/state')).stdout).toBe('moved\n');
      expect(pool.held()).toHaveLength(5);
    } finally {
      await pool.close();
    }
    expect([...(await t1.list()), ...(await t2.list())]).toEqual([]);
    await t1.deleteSnapshot((await t1.snapshots())[0]?.snapshot ?? '');
  });

  it('fails a call in flight on a stopped node with NodeLostError, probes it back, and after kill -9 places elsewhere', async () => {
    const pool = new Pool({ urls: NODES.map(url), tokenFile, monitorIntervalMs: 300, monitorMisses: 3, probeIntervalMs: 300 });
    let lostId = '';
    try {
      const a = await pool.create({ ref: 'ts/env-a', node: 't1' });
      const b = await pool.create({ ref: 'ts/env-b', node: 't2' });
      const t0 = Date.now();
      const inFlight = a.exec('sleep 600', { timeout: 900 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await eventually(async () => (await a.client.transport.busy) > 0);
      procs.get('t1')?.kill('SIGSTOP');
      const e = await inFlight;
      expect(e).toBeInstanceOf(NodeLostError);
      expect(e).toBeInstanceOf(TransportError);
      expect(e).toMatchObject({ code: 'NODE_LOST', reason: 'unresponsive', node: 't1', sandboxId: a.id });
      expect(Date.now() - t0).toBeLessThan(120_000);
      // while it is down: every call on it fails at once, the other node serves on
      await expect(a.readText('/env')).rejects.toBeInstanceOf(NodeLostError);
      expect((await b.exec('cat /env')).stdout).toBe('env-b');
      expect((await pool.create({ ref: 'ts/env-a' })).id).toMatch(/\.t2$/);
      procs.get('t1')?.kill('SIGCONT');
      await eventually(async () => (await pool.nodes()).every((n) => n.up));
      expect(await a.isAlive()).toBe(true); // it never went away

      lostId = b.id;
      await stopNode('t2', 'SIGKILL');
      const lost = await b.exec('true').catch((err: unknown) => err);
      expect(lost).toMatchObject({ code: 'NODE_LOST', reason: 'unreachable', node: 't2', sandboxId: b.id });
      expect((await pool.create({ ref: 'ts/env-b' })).id).toMatch(/\.t1$/);
      await b.delete({ missingOk: true }); // gone with its node: no error for a cleanup
    } finally {
      await pool.close();
    }
    expect(await new Client({ baseUrl: url('t1'), tokenFile }).list()).toEqual([]);
    // t2 again, over its store: it reaps what the killed server left, and answers 410 for its ids
    await startNode('t2', Number(new URL(url('t2')).port));
    expect(readdirSync(join(work, 't2', 'sandboxes'))).toEqual([]);
    await expect(new Client({ baseUrl: url('t2'), tokenFile }).info(lostId)).rejects.toMatchObject({ code: 'NODE_LOST', reason: 'restarted' });
  });
});
