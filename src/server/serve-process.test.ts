/**
 * `minisandbox serve` as a process: it refuses a public address without a token file, a SIGTERM
 * destroys every sandbox it holds (no state dir, no lease, no process left), and its job limits
 * and its sandboxes' niceness come from its command line.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
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
  return spawn(BIN, ['--registry', regDir, '--store', store.root, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
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
});
