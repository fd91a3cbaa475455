/**
 * `minisandbox serve` as a process: it refuses a public address without a token file, a SIGTERM
 * destroys every sandbox it holds (no state dir, no lease, no process left), and its job limits
 * and its sandboxes' niceness come from its command line; as a node of a cluster, its name, its
 * token (kept across restarts, or $MINISANDBOX_TOKEN) and its start-up prefetch do too.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { readState } from '../sandbox/state.js';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-serve-proc-'));
chmodSync(work, 0o755);
const regDir = join(work, 'registry');
const store = new StorePaths(join(work, 'store'));

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  await pushTree(new LocalRegistry(regDir), new StorePaths(join(work, 'push')), root, { tag: 'proc/busybox' });
}, 120_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

function serve(...args: string[]) {
  return serveWith({}, ...args);
}

function serveWith(env: Record<string, string>, ...args: string[]) {
  const { MINISANDBOX_TOKEN: _t, MINISANDBOX_NODE_NAME: _n, ...inherited } = process.env;
  return spawn(BIN, ['--registry', regDir, '--store', store.root, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...inherited, ...env } });
}

/** The JSON line serve prints once it listens. */
async function started(p: ReturnType<typeof serve>): Promise<{ listening: string; token_file: string | null }> {
  return JSON.parse(await new Promise<string>((r) => createInterface({ input: p.stdout }).once('line', r))) as { listening: string; token_file: string | null };
}

function exitOf(p: ReturnType<typeof serve>): Promise<number | null> {
  return new Promise((r) => p.on('exit', (code) => r(code)));
}

describe('minisandbox serve as a process', () => {
  it('refuses to listen on a non-loopback address without --token-file (exit 2)', async () => {
    const p = serve('--listen', '0.0.0.0:0');
    let err = '';
    p.stderr.on('data', (c: Buffer) => (err += c.toString()));
    expect(await exitOf(p)).toBe(2);
    expect(err).toContain('--token-file');
  });

  it('says which port is taken and what to do when another process listens there (exit 2)', async () => {
    const { createServer } = await import('node:net');
    const other = createServer();
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const port = (other.address() as { port: number }).port;
    try {
      const p = serve('--listen', `127.0.0.1:${port}`);
      let err = '';
      p.stderr.on('data', (c: Buffer) => (err += c.toString()));
      expect(await exitOf(p)).toBe(2);
      expect(err).toContain(`cannot listen on 127.0.0.1:${port}: another process listens there`);
      expect(err).not.toContain('EADDRINUSE');
    } finally {
      other.close();
    }
  });

  it('writes a new token to a 0600 file, and on SIGTERM destroys its sandboxes and exits 0', async () => {
    const p = serve('--listen', '127.0.0.1:0');
    const exited = exitOf(p);
    const first = await new Promise<string>((r) => createInterface({ input: p.stdout }).once('line', r));
    const { listening, token_file } = JSON.parse(first) as { listening: string; token_file: string };
    expect(statSync(token_file).mode & 0o777).toBe(0o600);
    const headers = { authorization: `Bearer ${readFileSync(token_file, 'utf8').trim()}`, 'content-type': 'application/json' };
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await fetch(`${listening}/v1/sandboxes`, { method: 'POST', headers, body: JSON.stringify({ ref: 'proc/busybox' }) });
      expect(r.status).toBe(201);
      ids.push(((await r.json()) as { id: string }).id);
    }
    // one of them busy with a command when the TERM comes
    const running = fetch(`${listening}/v1/sandboxes/${ids[0]}/exec`, { method: 'POST', headers, body: JSON.stringify({ command: 'sleep 600' }) }).catch(
      () => undefined,
    );
    const holders = await Promise.all(ids.map(async (id) => (await readState(store.sandboxesDir, id))!.holderPid));
    p.kill('SIGTERM');
    expect(await exited).toBe(0);
    await running;
    expect(readdirSync(store.sandboxesDir)).toEqual([]);
    expect(readdirSync(store.leasesDir)).toEqual([]);
    for (const pid of holders) expect(() => process.kill(pid, 0)).toThrow();
  });

  it('reaps at start what a predecessor killed with -9 left: its sandboxes and leases', async () => {
    const first = serve('--listen', '127.0.0.1:0');
    const exited = exitOf(first);
    const { listening, token_file } = JSON.parse(await new Promise<string>((r) => createInterface({ input: first.stdout }).once('line', r))) as {
      listening: string;
      token_file: string;
    };
    const headers = { authorization: `Bearer ${readFileSync(token_file, 'utf8').trim()}`, 'content-type': 'application/json' };
    const r = await fetch(`${listening}/v1/sandboxes`, { method: 'POST', headers, body: JSON.stringify({ ref: 'proc/busybox' }) });
    const { id } = (await r.json()) as { id: string };
    first.kill('SIGKILL');
    await exited;
    expect(readdirSync(store.sandboxesDir)).toEqual([id]);
    const second = serve('--listen', '127.0.0.1:0');
    const done = exitOf(second);
    // it prints where it listens once the reaping is done
    await new Promise<string>((res) => createInterface({ input: second.stdout }).once('line', res));
    expect(readdirSync(store.sandboxesDir)).toEqual([]);
    expect(readdirSync(store.leasesDir)).toEqual([]);
    second.kill('SIGTERM');
    expect(await done).toBe(0);
  });

  it('takes --max-jobs-per-sandbox, --job-output-budget and --sandbox-nice from its command line, and refuses bad values (exit 2)', async () => {
    for (const bad of [
      ['--max-jobs-per-sandbox', '0'],
      ['--job-output-budget', 'lots'],
      ['--sandbox-nice', '20'],
    ]) {
      const p = serve('--listen', '127.0.0.1:0', ...bad);
      let err = '';
      p.stderr.on('data', (c: Buffer) => (err += c.toString()));
      expect(await exitOf(p)).toBe(2);
      expect(err).toContain(bad[0]);
    }
    const p = serve('--listen', '127.0.0.1:0', '--max-jobs-per-sandbox', '1', '--job-output-budget', '1k', '--sandbox-nice', '3');
    const exited = exitOf(p);
    const { listening, token_file } = JSON.parse(await new Promise<string>((r) => createInterface({ input: p.stdout }).once('line', r))) as {
      listening: string;
      token_file: string;
    };
    const headers = { authorization: `Bearer ${readFileSync(token_file, 'utf8').trim()}`, 'content-type': 'application/json' };
    const post = (path: string, body: unknown) => fetch(`${listening}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    const { id } = (await (await post('/v1/sandboxes', { ref: 'proc/busybox' })).json()) as { id: string };
    const exec = (command: string) => post(`/v1/sandboxes/${id}/exec?async=true`, { command });
    // field 19 of a process's stat is its niceness
    const niceness = (await (await post(`/v1/sandboxes/${id}/exec`, { command: "cut -d' ' -f19 /proc/self/stat" })).json()) as { stdout: string };
    expect(niceness.stdout).toBe('3\n');
    const wait = async (job: string) => (await fetch(`${listening}/v1/sandboxes/${id}/jobs/${job}?wait=300`, { headers })).json();
    // one job at most: a second is refused while the first runs
    const marker = sleepMarker();
    const first = (await (await exec(`sleep ${marker}`)).json()) as { job: string };
    await eventually(() => sleepRuns(marker));
    const refused = await exec('true');
    expect(refused.status).toBe(429);
    await fetch(`${listening}/v1/sandboxes/${id}/jobs/${first.job}`, { method: 'DELETE', headers });
    // 1 KiB of finished output kept: a job of 800 bytes, then another, and the first is dropped
    const jobs: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await exec('head -c 800 /dev/zero | tr "\\0" x');
      expect(r.status).toBe(202);
      const { job } = (await r.json()) as { job: string };
      expect(await wait(job)).toMatchObject({ status: 'done' });
      jobs.push(job);
    }
    expect((await fetch(`${listening}/v1/sandboxes/${id}/jobs/${jobs[0]}`, { headers })).status).toBe(404);
    expect((await fetch(`${listening}/v1/sandboxes/${id}/jobs/${jobs[1]}`, { headers })).status).toBe(200);
    p.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('keeps its node name and its token across a kill -9, and answers 410 for the sandboxes that lost', async () => {
    const first = serve('--listen', '127.0.0.1:0', '--node-name', 'Proc-Node');
    const firstExit = exitOf(first);
    const a = await started(first);
    expect(a.token_file).toBe(join(store.root, 'serve.token'));
    const token = readFileSync(a.token_file!, 'utf8').trim();
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const made = await fetch(`${a.listening}/v1/sandboxes`, { method: 'POST', headers, body: JSON.stringify({ ref: 'proc/busybox' }) });
    const { id } = (await made.json()) as { id: string };
    expect(id).toMatch(/\.proc-node$/);
    first.kill('SIGKILL');
    await firstExit;

    const second = serve('--listen', '127.0.0.1:0', '--node-name', 'proc-node');
    const secondExit = exitOf(second);
    const b = await started(second);
    expect(readFileSync(b.token_file!, 'utf8').trim()).toBe(token); // a client made before still gets in
    expect(await (await fetch(`${b.listening}/v1/health`)).json()).toMatchObject({ ok: true, node: 'proc-node', ready: true });
    const lost = await fetch(`${b.listening}/v1/sandboxes/${id}`, { headers });
    expect([lost.status, ((await lost.json()) as { error: { code: string } }).error.code]).toEqual([410, 'NODE_RESTARTED']);
    second.kill('SIGTERM');
    expect(await secondExit).toBe(0);
  });

  it('takes its token from $MINISANDBOX_TOKEN, and prefetches a dataset at start, ready once it is in', async () => {
    const short = serveWith({ MINISANDBOX_TOKEN: 'short' }, '--listen', '127.0.0.1:0');
    let err = '';
    short.stderr.on('data', (c: Buffer) => (err += c.toString()));
    expect(await exitOf(short)).toBe(2);
    expect(err).toContain('$MINISANDBOX_TOKEN is shorter than 16 characters');
    const rows = join(work, 'prefetch.jsonl');
    writeFileSync(
      rows,
      ['busybox', 'nope'].map((i) => `${JSON.stringify({ instance_id: i, repo: 'o/r', base_commit: 'a'.repeat(40), version: '1' })}\n`).join(''),
    );
    const token = 'a-cluster-token-from-a-kubernetes-secret';
    // a token from the environment also lets it listen beyond loopback
    const p = serveWith(
      { MINISANDBOX_TOKEN: token, MINISANDBOX_NODE_NAME: 'env-node' },
      ...['--listen', '0.0.0.0:0', '--prefetch-dataset', `proc=${rows}`, '--prefetch-io-budget', '64m', '--ready-after-prefetch'],
    );
    const exited = exitOf(p);
    const s = await started(p);
    expect(s.token_file).toBeNull();
    const url = s.listening.replace('0.0.0.0', '127.0.0.1');
    await eventually(async () => (await fetch(`${url}/v1/health?ready=1`)).status === 200);
    const headers = { authorization: `Bearer ${token}` };
    expect(await (await fetch(`${url}/v1/prefetch`, { headers })).json()).toMatchObject({
      state: 'failed',
      total: 2,
      done: 1,
      failed: [{ ref: 'proc/nope', code: 'NOT_FOUND' }],
      io_budget_bytes: 64 << 20,
    });
    expect(await (await fetch(`${url}/v1/capacity`, { headers })).json()).toMatchObject({ node: 'env-node' });
    p.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
