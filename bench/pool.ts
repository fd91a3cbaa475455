/**
 * The client's Pool over `serve` nodes, baselines side by side in one run:
 *   1. create -> exec `true` -> delete at concurrency 1 through a Pool of three nodes vs a Client of
 *      one of them, p50 and p99 (alternating halves, so drift in the machine's load falls on both
 *      sides), ratio pool / direct (aim <= 1.1x): what placement costs a create;
 *   2. creates per second: `--workers` loops of create -> delete for `--seconds`, through a Pool of
 *      three nodes vs a Pool of one. The nodes are processes of one machine: on two shared cores
 *      three nodes have no more CPU than one, and the ratio says what a pool adds where they do not
 *      share it only when it is read with that in mind;
 *   3. a node's start to its first served sandbox: `serve --prefetch-dataset --ready-after-prefetch`
 *      (start -> ready -> first create) vs a cold node (start -> listening -> first create, which
 *      pulls its environment), over an S3-protocol registry (s3rver on loopback);
 *   4. how long a lost node takes to surface as NodeLostError: a call in flight when its node is
 *      killed with -9, a call made after it, and a call in flight on a node stopped with SIGSTOP
 *      (found by the pool's monitor: default 2 s probes, 3 misses).
 * The nodes are `minisandbox serve` processes on loopback (from the sources through tsx) with
 * stores of their own over one registry; the environment is a busybox root, pulled before timing.
 * Compare ratios taken in one run, never figures from runs apart.
 * Flags: --cycles N (section 1, per side, default 48), --workers N and --seconds S (section 2,
 * default 8 and 5), --instances N (the dataset of section 3, default 6, each 4 MiB of its own).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Client, NodeLostError, Pool } from '../src/client/index.js';
import { pushTree } from '../src/publish/push.js';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { S3Registry } from '../src/registry/s3.js';
import { StorePaths } from '../src/store/paths.js';
import { startS3Server } from '../test/s3/server.js';

const { values: flags } = parseArgs({
  options: {
    cycles: { type: 'string', default: '48' },
    workers: { type: 'string', default: '8' },
    seconds: { type: 'string', default: '5' },
    instances: { type: 'string', default: '6' },
  },
});
const CYCLES = Number(flags.cycles);
const WORKERS = Number(flags.workers);
const SECONDS = Number(flags.seconds);
const INSTANCES = Number(flags.instances);
const BIN = resolve(import.meta.dirname, '../bin/minisandbox');
const REF = 'pb/i-0';

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
};
const ms = (x: number): string => `${x.toFixed(1)} ms`;

interface Node {
  name: string;
  url: string;
  proc: ChildProcess;
  started: number;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'bench-pool-'));
  chmodSync(work, 0o755);
  const s3 = await startS3Server();
  const nodes: Node[] = [];
  const tokenFile = join(work, 'token');
  writeFileSync(tokenFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
  const env = {
    ...process.env,
    AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    AWS_REGION: s3.region,
  };
  const registry = `s3://${s3.bucket}/bench?endpoint=${s3.endpoint}`;
  const start = async (name: string, ...args: string[]): Promise<Node> => {
    const started = performance.now();
    const proc = spawn(
      BIN,
      ['--registry', registry, '--store', join(work, name), 'serve', '--listen', '127.0.0.1:0', '--token-file', tokenFile, '--node-name', name, ...args],
      { stdio: ['ignore', 'pipe', 'ignore'], env },
    );
    const out = proc.stdout;
    if (out === null) throw new Error('serve has no stdout');
    const line = await new Promise<string>((r, j) => {
      createInterface({ input: out }).once('line', r);
      proc.once('exit', (code) => j(new Error(`serve ${name} exited ${code}`)));
    });
    const n = { name, url: (JSON.parse(line) as { listening: string }).listening, proc, started };
    nodes.push(n);
    return n;
  };
  const stop = (n: Node, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> =>
    // a process killed by a signal has no exit code, only a signal code
    n.proc.exitCode !== null || n.proc.signalCode !== null
      ? Promise.resolve()
      : new Promise((r) => {
          n.proc.once('exit', () => r());
          n.proc.kill('SIGCONT');
          n.proc.kill(signal);
        });
  try {
    // the dataset: busybox roots, each with 4 MiB of its own
    const base = join(work, 'rootfs');
    await populateBusyboxRoot('/bin/busybox', base);
    const reg = new S3Registry(`s3://${s3.bucket}/bench`, { endpoint: s3.endpoint, region: s3.region, credentials: s3.credentials });
    const rows: string[] = [];
    for (let i = 0; i < INSTANCES; i++) {
      const root = join(work, `root-${i}`);
      cpSync(base, root, { recursive: true, verbatimSymlinks: true });
      writeFileSync(join(root, 'data'), randomBytes(4 << 20));
      await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: `pb/i-${i}`, config: { workdir: '/root' } });
      rows.push(JSON.stringify({ instance_id: `i-${i}`, repo: 'bench/pool', base_commit: '0'.repeat(40), version: '1' }));
    }
    reg.close();
    const dataset = join(work, 'pb.jsonl');
    writeFileSync(dataset, `${rows.join('\n')}\n`);

    const three = await Promise.all(['p1', 'p2', 'p3'].map((n) => start(n, '--max-sandboxes', '64')));
    for (const n of three) await new Client({ baseUrl: n.url, tokenFile }).prewarm([REF]);
    const direct = new Client({ baseUrl: three[0]?.url ?? '', tokenFile });
    const pool = new Pool({ urls: three.map((n) => n.url), tokenFile });
    const one = new Pool({ urls: [three[0]?.url ?? ''], tokenFile });

    // 1. create -> exec -> delete at concurrency 1
    const cycle = async (make: () => Promise<{ exec: (c: string) => Promise<unknown>; delete: () => Promise<void> }>): Promise<number> => {
      const t0 = performance.now();
      const sb = await make();
      await sb.exec('true');
      await sb.delete();
      return performance.now() - t0;
    };
    const lat = { pool: [] as number[], direct: [] as number[] };
    for (let i = 0; i < 4; i++) await cycle(() => pool.create({ ref: REF })); // warm-up, untimed
    for (let i = 0; i < 4; i++) await cycle(() => direct.create({ ref: REF }));
    for (let half = 0; half < 2; half++) {
      for (let i = 0; i < CYCLES / 2; i++) lat.pool.push(await cycle(() => pool.create({ ref: REF })));
      for (let i = 0; i < CYCLES / 2; i++) lat.direct.push(await cycle(() => direct.create({ ref: REF })));
    }
    const p50 = { pool: quantile(lat.pool, 0.5), direct: quantile(lat.direct, 0.5) };
    console.log(
      `1. create->exec->delete, concurrency 1, ${CYCLES} cycles a side: pool of 3 p50 ${ms(p50.pool)} p99 ${ms(quantile(lat.pool, 0.99))}, ` +
        `direct to one node p50 ${ms(p50.direct)} p99 ${ms(quantile(lat.direct, 0.99))}; pool/direct p50 ${(p50.pool / p50.direct).toFixed(2)}x (aim <= 1.1x)`,
    );

    // 2. creates per second, three nodes vs one
    const rate = async (p: Pool): Promise<number> => {
      const end = performance.now() + SECONDS * 1000;
      let n = 0;
      await Promise.all(
        Array.from({ length: WORKERS }, async () => {
          while (performance.now() < end) {
            const sb = await p.create({ ref: REF });
            await sb.delete();
            n++;
          }
        }),
      );
      return n / SECONDS;
    };
    const r1 = await rate(one);
    const r3 = await rate(pool);
    console.log(
      `2. creates/s, ${WORKERS} workers for ${SECONDS} s: 3 nodes ${r3.toFixed(1)}/s vs 1 node ${r1.toFixed(1)}/s: ${(r3 / r1).toFixed(2)}x ` +
        "(the three nodes share this machine's cores: no more CPU than one)",
    );

    // 3. a node's start to its first served sandbox
    const firstSandbox = async (n: Node, ready: boolean): Promise<{ ready: number; first: number; create: number }> => {
      const c = new Client({ baseUrl: n.url, tokenFile });
      if (ready)
        for (;;) {
          const r = await fetch(`${n.url}/v1/health?ready=1`);
          if (r.status === 200) break;
          await new Promise((res) => setTimeout(res, 20));
        }
      const readyAt = performance.now();
      const sb = await c.create({ ref: `pb/i-${INSTANCES - 1}` });
      const firstAt = performance.now();
      await sb.delete();
      return { ready: readyAt - n.started, first: firstAt - n.started, create: firstAt - readyAt };
    };
    const cold = await firstSandbox(await start('cold'), false);
    const warm = await firstSandbox(await start('warm', '--prefetch-dataset', `pb=${dataset}`, '--ready-after-prefetch'), true);
    console.log(
      `3. start -> first sandbox: prefetched ${INSTANCES} x 4 MiB: ready at ${ms(warm.ready)}, first sandbox at ${ms(warm.first)} ` +
        `(its create ${ms(warm.create)}); cold: listening at ${ms(cold.ready)}, first sandbox at ${ms(cold.first)} (its create, pulling, ` +
        `${ms(cold.create)}); first create prefetched/cold ${(warm.create / cold.create).toFixed(2)}x`,
    );

    // 4. how long NodeLostError takes: kill -9 (in flight, then a new call), SIGSTOP (the monitor)
    const lostAfter = async (victim: Node, signal: NodeJS.Signals): Promise<{ inFlight: number; after: number }> => {
      const p = new Pool({ urls: [victim.url, three[0]?.url ?? ''], tokenFile });
      const [a, b] = [await p.create({ ref: REF, node: victim.name }), await p.create({ ref: REF, node: victim.name })];
      const running = a.exec('sleep 600', { timeout: 900 }).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 300));
      const t0 = performance.now();
      victim.proc.kill(signal);
      const e = await running;
      const inFlight = performance.now() - t0;
      if (!(e instanceof NodeLostError)) throw new Error(`expected NodeLostError, got ${String(e)}`);
      const t1 = performance.now();
      const e2 = await b.exec('true').catch((x: unknown) => x);
      if (!(e2 instanceof NodeLostError)) throw new Error(`expected NodeLostError, got ${String(e2)}`);
      const after = performance.now() - t1;
      await p.close();
      return { inFlight, after };
    };
    const killed = await lostAfter(three[2] as Node, 'SIGKILL');
    const stopped = await lostAfter(three[1] as Node, 'SIGSTOP');
    console.log(
      `4. NodeLostError after kill -9: in flight ${ms(killed.inFlight)}, next call ${ms(killed.after)}; ` +
        `after SIGSTOP (monitor 2 s x 3): in flight ${ms(stopped.inFlight)}, next call ${ms(stopped.after)}`,
    );
    await pool.close();
    await one.close();
  } finally {
    await Promise.all(nodes.map((n) => stop(n)));
    await s3.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
