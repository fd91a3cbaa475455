/**
 * The sandbox server against the in-process library, baselines side by side in one run:
 *   1. create -> exec `true` -> delete over HTTP vs openSandbox -> exec -> destroy, p50 and p99 of
 *      the cycle at concurrency 1, 16 and 128 (alternating halves, so drift in the machine's load
 *      falls on both sides), ratio HTTP / library (aim <= 1.3x);
 *   2. sustained creates per second: 8 workers loop create -> delete for a fixed time, creates
 *      completed per second over HTTP vs the library (aim >= 20/s);
 *   3. session round trip: `true` in an existing session, over HTTP vs Session.run (aim < 2 ms p50),
 *      after an untimed warm-up of both sides (a fresh server's first requests run unoptimised
 *      code), with the server's CPU per run and per bare request (GET /v1/health);
 *   3b. SWE-ReX face round trip: `run_in_session` (POST /swerex/<id>/run_in_session: the syntax
 *      check, the command on the session's terminal, its prompt) against the native session run of
 *      the same command in the same sandbox (section 3's HTTP side), one of each in turn after an
 *      untimed warm-up of both, ratio face / native (aim <= 1.5x), for `true` (plain words, which
 *      need no parser) and `echo "ok" >/dev/null` (which the session's syntax checker parses);
 *   4. liveness while 128 sandboxes run commands (128 clients loop exec `true` over HTTP): p50/p99
 *      of SWE-ReX's `GET /swerex/<key>/is_alive`, for a live sandbox's id and for an `inst:` key
 *      never created, each probed one request at a time from a worker thread of its own so the
 *      load generator's event loop does not add to it (aim p99 < 10 ms); and the same (sandbox
 *      key) while those 128 are deleted at once, as a trainer ends a batch of rollouts;
 *   5. host memory per idle sandbox with 128 idle sandboxes minus none: RSS and PSS of the server,
 *      its launcher and every process below them (holders, sandbox inits), from /proc, and the
 *      sandboxes' cgroup memory (memory.current, or v1's usage_in_bytes: pages charged to them,
 *      tmpfs uppers and their processes included; each gets a 1 GB memory limit, hence a cgroup).
 * The server is `minisandbox serve` in its own process (run from the sources through tsx), as a
 * trainer would use it; its request log goes to a file; the client is node:http over kept-alive
 * connections. The library runs in this process and, like the server, probes the host once, so
 * the ratios are HTTP and the server alone. The environment is a busybox root pushed to a temp
 * registry and pulled once before timing.
 * Reading the figures on a shared host: a session round trip over HTTP passes through four
 * processes (client, server, launcher, shell) against the library's three; with the CPUs busy,
 * the server's write to the launcher is where the scheduler preempts it (measured: the write call
 * itself takes milliseconds), so HTTP's share grows with the host's load.
 * Compare ratios taken in one run, never figures from runs apart.
 * Output: a table on a terminal; JSON lines (one object per result) when piped or with --json.
 * Flags: --cycles N (cycles per level and side, default 48; the 128 level runs at least 2x128),
 * --heavy N (the 128 of sections 1, 4 and 5), --max-sandboxes N (the server's cap, default heavy+32),
 * --seconds S (length of 2 and 4, default 5), --session-iter N (default 1000), --session-warmup N (untimed runs
 * per side first, default 1000), --cpu-prof DIR
 * (the server runs under node --cpu-prof, profiles written to DIR on its exit), --only LIST
 * (comma-separated of cycle,creates,session,swerex,liveness,memory), --levels LIST (the concurrency
 * levels of section 1, default 1,16,heavy), --server-log FILE (keep the server's
 * request log, whose `ms` is each request's time inside the server), --sandbox-nice N (the server's,
 * default its own 10: 0 is the baseline of the sandboxes' CPU share).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { Agent, request } from 'node:http';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../src/registry/local.js';
import { openSandbox } from '../src/runtime/open.js';
import { probeHost } from '../src/sandbox/host.js';
import { descendantsOf } from '../src/sandbox/proc.js';
import type { Sandbox } from '../src/sandbox/sandbox.js';
import { readState } from '../src/sandbox/state.js';
import { pushTree } from '../src/publish/push.js';
import { addHostPrograms } from '../test/helpers/host-programs.js';
import { StorePaths } from '../src/store/paths.js';

const { values: flags } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    cycles: { type: 'string', default: process.env.BENCH_CYCLES ?? '48' },
    heavy: { type: 'string', default: '128' },
    'max-sandboxes': { type: 'string' },
    seconds: { type: 'string', default: '5' },
    'session-iter': { type: 'string', default: '1000' },
    'session-warmup': { type: 'string', default: '1000' },
    'cpu-prof': { type: 'string' },
    only: { type: 'string', default: 'cycle,creates,session,swerex,liveness,memory' },
    'server-log': { type: 'string' },
    levels: { type: 'string' },
    'sandbox-nice': { type: 'string' },
  },
});
const CYCLES = Number(flags.cycles);
const HEAVY = Number(flags.heavy);
const MAX = Number(flags['max-sandboxes'] ?? HEAVY + 32);
const SECONDS = Number(flags.seconds);
const SESSION_ITER = Number(flags['session-iter']);
const SESSION_WARMUP = Number(flags['session-warmup']);
const ONLY = new Set(flags.only.split(','));
const JSON_OUT = flags.json || !process.stdout.isTTY;
const REF = 'bench/busybox';
const ROOT = resolve(import.meta.dirname, '..');

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const r2 = (x: number): number => Math.round(x * 100) / 100;

/** One result: a JSON line, or a table row under its section's heading. */
const headed = new Set<string>();
function report(section: string, heading: string, row: Record<string, number | string>, human: string): void {
  if (JSON_OUT) {
    console.log(JSON.stringify({ section, ...row }));
    return;
  }
  if (!headed.has(section)) {
    headed.add(section);
    console.log(`\n${heading}`);
  }
  console.log(`  ${human}`);
}

/** Runs `n` cycles with `conc` in flight at once; the wall time of each cycle in ms. */
async function measure(n: number, conc: number, cycle: () => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  let left = n;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (left-- > 0) {
        const t = performance.now();
        await cycle();
        times.push(performance.now() - t);
      }
    }),
  );
  return times;
}

/** `workers` loops of `cycle` for `ms`; cycles completed per second. */
async function rate(workers: number, ms: number, cycle: () => Promise<void>): Promise<number> {
  const end = performance.now() + ms;
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (performance.now() < end) {
        await cycle();
        done++;
      }
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

/** CPU time (user + system, ms) a process has used so far, from /proc (10 ms ticks). */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** RSS and PSS (kB) of a process; zeros for one that is gone. */
async function memKb(pid: number): Promise<{ rss: number; pss: number }> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const get = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rss: get('Rss'), pss: get('Pss') };
}

const work = mkdtempSync(join(tmpdir(), 'ms-bench-serve-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
const regDir = join(work, 'registry');
const reg = new LocalRegistry(regDir);
const store = new StorePaths(join(work, 'store'));
const libSandboxes = new Set<Sandbox>();
let server: ChildProcess | undefined;
let serverExit: Promise<void> | undefined;

async function stopServer(): Promise<void> {
  if (server === undefined || server.exitCode !== null || server.signalCode !== null) return;
  server.kill('SIGTERM'); // it destroys every sandbox it holds before it exits
  const killer = setTimeout(() => server?.kill('SIGKILL'), 60_000);
  await serverExit;
  clearTimeout(killer);
}
async function cleanup(): Promise<void> {
  await Promise.allSettled([...libSandboxes].map((s) => s.destroy()));
  await stopServer();
  rmSync(work, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    process.stderr.write(`bench: ${sig}, cleaning up\n`);
    void cleanup().finally(() => process.exit(130));
  });
}

/**
 * Probes `url` one request at a time (5 ms apart) from a worker thread, whose event loop the load
 * generated here does not touch, until stopped; the latency of each probe in ms.
 */
function startProbe(url: string, token: string): { stop: () => Promise<number[]> } {
  const worker = new Worker(
    `const { parentPort, workerData: w } = require('node:worker_threads');
    const http = require('node:http');
    const agent = new http.Agent({ keepAlive: true });
    let stop = false;
    parentPort.once('message', () => (stop = true));
    const get = () => new Promise((res, rej) => {
      const req = http.get(w.url, { agent, headers: { 'x-api-key': w.token } }, (r) => {
        r.resume();
        r.on('end', () => res(r.statusCode));
      });
      req.on('error', rej);
    });
    (async () => {
      const times = [];
      while (!stop) {
        const t = performance.now();
        const status = await get();
        if (status !== 200) throw new Error('liveness: ' + status);
        times.push(performance.now() - t);
        await new Promise((res) => setTimeout(res, 5));
      }
      parentPort.postMessage(times);
    })();`,
    { eval: true, workerData: { url, token } },
  );
  const times = new Promise<number[]>((res, rej) => {
    worker.once('message', res);
    worker.once('error', rej);
  });
  return {
    stop: async () => {
      worker.postMessage('stop');
      const ts = await times;
      await worker.terminate();
      return ts;
    },
  };
}

async function startServerProcess(): Promise<{ url: string; token: string; pid: number }> {
  const node = [...(flags['cpu-prof'] === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', resolve(flags['cpu-prof'])])];
  const args = [
    ...node,
    '--import',
    `file://${ROOT}/node_modules/tsx/dist/loader.mjs`,
    join(ROOT, 'src/cli/main.ts'),
    '--registry',
    regDir,
    '--store',
    store.root,
    'serve',
    '--listen',
    '127.0.0.1:0',
    '--token-file',
    join(work, 'token'),
    '--max-sandboxes',
    String(MAX),
    '--idle-timeout',
    '1h',
    '--ttl',
    '2h',
    ...(flags['sandbox-nice'] === undefined ? [] : ['--sandbox-nice', flags['sandbox-nice']]),
  ];
  const log = openSync(flags['server-log'] ?? join(work, 'serve.log'), 'a');
  const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', log] });
  server = p;
  serverExit = new Promise((r) => p.once('exit', () => r()));
  const line = await Promise.race([
    new Promise<string>((r) => createInterface({ input: p.stdout! }).once('line', r)),
    serverExit.then(() => {
      throw new Error(`the server exited at start: ${readFileSync(flags['server-log'] ?? join(work, 'serve.log'), 'utf8').slice(-2000)}`);
    }),
  ]);
  const { listening } = JSON.parse(line) as { listening: string };
  return { url: listening, token: readFileSync(join(work, 'token'), 'utf8').trim(), pid: p.pid! };
}

try {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  // SWE-ReX's sessions run bash: the host's, copied in (section 3b)
  addHostPrograms(root, ['/bin/bash']);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: REF });
  // probed once, as the server does: what differs between the two sides is then HTTP and the server
  const quiet = { warn: (): void => undefined, host: await probeHost() };
  const libOpen = async (): Promise<Sandbox> => {
    const sb = await openSandbox(reg, store, REF, quiet);
    libSandboxes.add(sb);
    return sb;
  };
  const libDestroy = async (sb: Sandbox): Promise<void> => {
    await sb.destroy();
    libSandboxes.delete(sb);
  };
  await libDestroy(await libOpen()); // pulls the environment: what follows times sandboxes over a pulled one
  const srv = await startServerProcess();
  // node:http over kept-alive connections, as a trainer's client would hold them (fetch's own
  // cost per request is larger than the server's and would hide it)
  const agent = new Agent({ keepAlive: true });
  const { hostname, port } = new URL(srv.url);
  const api = (method: string, path: string, body?: unknown): Promise<{ status: number; text: () => Promise<string>; json: () => Promise<unknown> }> =>
    new Promise((res, rej) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const headers: Record<string, string> = { authorization: `Bearer ${srv.token}` };
      if (data !== undefined) headers['content-type'] = 'application/json';
      const req = request({ hostname, port, path, method, agent, headers }, (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('error', rej);
        r.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          res({ status: r.statusCode ?? 0, text: async () => text, json: async () => JSON.parse(text) as unknown });
        });
      });
      req.on('error', rej);
      req.end(data);
    });
  const httpCreate = async (extra: Record<string, unknown> = {}): Promise<string> => {
    const c = await api('POST', '/v1/sandboxes', { ref: REF, ...extra });
    if (c.status !== 201) throw new Error(`create: ${c.status} ${await c.text()}`);
    return ((await c.json()) as { id: string }).id;
  };
  const httpDelete = async (id: string): Promise<void> => {
    const d = await api('DELETE', `/v1/sandboxes/${id}`);
    if (d.status !== 204) throw new Error(`delete: ${d.status} ${await d.text()}`);
  };
  const httpTrue = async (id: string): Promise<void> => {
    const e = (await (await api('POST', `/v1/sandboxes/${id}/exec`, { argv: ['/bin/busybox', 'true'] })).json()) as { exit_code: number };
    if (e.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(e)}`);
  };
  const http = async (): Promise<void> => {
    const id = await httpCreate();
    await httpTrue(id);
    await httpDelete(id);
  };
  const lib = async (): Promise<void> => {
    const sb = await libOpen();
    try {
      const o = await sb.exec(['/bin/busybox', 'true']);
      if (o.exitCode !== 0) throw new Error(`exec: ${JSON.stringify(o)}`);
    } finally {
      await libDestroy(sb);
    }
  };
  await http();
  if (!JSON_OUT)
    console.log(`serve bench: server pid ${srv.pid} (cap ${MAX}), ${CYCLES} cycles per level and side, heavy level ${HEAVY}, ${SECONDS} s windows`);

  if (ONLY.has('cycle')) {
    for (const conc of flags.levels === undefined ? [1, 16, HEAVY] : flags.levels.split(',').map(Number)) {
      const n = Math.max(CYCLES, 2 * conc);
      const h: number[] = [];
      const l: number[] = [];
      for (let round = 0; round < 2; round++) {
        l.push(...(await measure(n / 2, conc, lib)));
        h.push(...(await measure(n / 2, conc, http)));
      }
      const [h50, h99, l50, l99] = [pct(h, 50), pct(h, 99), pct(l, 50), pct(l, 99)];
      report(
        'cycle',
        'create -> exec true -> delete (ms; ratio http / library, aim <= 1.3x)',
        {
          concurrency: conc,
          cycles: n,
          http_p50_ms: r2(h50),
          http_p99_ms: r2(h99),
          lib_p50_ms: r2(l50),
          lib_p99_ms: r2(l99),
          ratio_p50: r2(h50 / l50),
          ratio_p99: r2(h99 / l99),
        },
        `concurrency ${String(conc).padStart(3)}: http p50 ${h50.toFixed(1).padStart(7)} p99 ${h99.toFixed(1).padStart(7)} | ` +
          `library p50 ${l50.toFixed(1).padStart(7)} p99 ${l99.toFixed(1).padStart(7)} | ` +
          `ratio p50 ${(h50 / l50).toFixed(2)}x p99 ${(h99 / l99).toFixed(2)}x`,
      );
    }
  }

  if (ONLY.has('creates')) {
    const ms = SECONDS * 1000;
    const l = await rate(8, ms, async () => libDestroy(await libOpen()));
    const h = await rate(8, ms, async () => httpDelete(await httpCreate()));
    report(
      'creates',
      'sustained creates per second (8 workers looping create -> delete; aim >= 20/s)',
      { workers: 8, seconds: SECONDS, http_per_s: r2(h), lib_per_s: r2(l), ratio: r2(h / l) },
      `http ${h.toFixed(1)}/s | library ${l.toFixed(1)}/s | ratio ${(h / l).toFixed(2)}x`,
    );
  }

  if (ONLY.has('session')) {
    const id = await httpCreate();
    const sres = await api('POST', `/v1/sandboxes/${id}/sessions`, {});
    const { session } = (await sres.json()) as { session: string };
    const hrun = async (): Promise<void> => {
      const o = (await (await api('POST', `/v1/sandboxes/${id}/sessions/${session}/run`, { command: 'true' })).json()) as { exit_code: number };
      if (o.exit_code !== 0) throw new Error(`session run: ${JSON.stringify(o)}`);
    };
    const sb = await libOpen();
    const s = sb.newSession();
    const lrun = async (): Promise<void> => {
      const o = await s.run('true');
      if (o.exitCode !== 0) throw new Error(`session run: ${JSON.stringify(o)}`);
    };
    // untimed warm-up on both sides: the first thousand or so requests of a fresh server run
    // unoptimised code (measured: 2-3x the CPU per run of a warm one); a trainer's server is warm
    for (let i = 0; i < SESSION_WARMUP; i++) {
      await hrun();
      await lrun();
    }
    const h: number[] = [];
    const l: number[] = [];
    // CPU each side spends per run: the server's (its process) against this process's on the library's runs
    let srvCpu = 0;
    let libCpu = 0;
    for (let round = 0; round < 2; round++) {
      const c0 = process.cpuUsage();
      l.push(...(await measure(SESSION_ITER / 2, 1, lrun)));
      const c1 = process.cpuUsage(c0);
      libCpu += (c1.user + c1.system) / 1000;
      const s0 = cpuMs(srv.pid);
      h.push(...(await measure(SESSION_ITER / 2, 1, hrun)));
      srvCpu += cpuMs(srv.pid) - s0;
    }
    await libDestroy(sb);
    await httpDelete(id);
    // the server's CPU for a request that does nothing (auth, routing, reply, log): HTTP's own share
    const b0 = cpuMs(srv.pid);
    const bare = await measure(SESSION_ITER, 1, async () => {
      const r = await api('GET', '/v1/health');
      if (r.status !== 200) throw new Error(`health: ${r.status}`);
    });
    const bareCpu = (cpuMs(srv.pid) - b0) / SESSION_ITER;
    const [h50, h99, l50, l99] = [pct(h, 50), pct(h, 99), pct(l, 50), pct(l, 99)];
    report(
      'session',
      'session round trip, `true` in an open session (ms; aim http p50 < 2 ms)',
      {
        runs: SESSION_ITER,
        http_p50_ms: r2(h50),
        http_p99_ms: r2(h99),
        lib_p50_ms: r2(l50),
        lib_p99_ms: r2(l99),
        ratio_p50: r2(h50 / l50),
        server_cpu_ms_per_run: r2(srvCpu / SESSION_ITER),
        lib_cpu_ms_per_run: r2(libCpu / SESSION_ITER),
        bare_request_p50_ms: r2(pct(bare, 50)),
        bare_request_server_cpu_ms: r2(bareCpu),
      },
      `http p50 ${h50.toFixed(2)} p99 ${h99.toFixed(2)} | library p50 ${l50.toFixed(2)} p99 ${l99.toFixed(2)} | ratio p50 ${(h50 / l50).toFixed(2)}x | ` +
        `CPU per run: server ${(srvCpu / SESSION_ITER).toFixed(3)} ms, library ${(libCpu / SESSION_ITER).toFixed(3)} ms | ` +
        `GET /v1/health p50 ${pct(bare, 50).toFixed(2)} ms, server CPU ${bareCpu.toFixed(3)} ms`,
    );
  }

  if (ONLY.has('swerex')) {
    const id = await httpCreate();
    const { session } = (await (await api('POST', `/v1/sandboxes/${id}/sessions`, {})).json()) as { session: string };
    const created = await api('POST', `/swerex/${id}/create_session`, {});
    if (created.status !== 200) throw new Error(`create_session: ${created.status} ${await created.text()}`);
    const face = (command: string) => async (): Promise<void> => {
      const r = await api('POST', `/swerex/${id}/run_in_session`, { command });
      const o = (await r.json()) as { exit_code?: number };
      if (r.status !== 200 || o.exit_code !== 0) throw new Error(`run_in_session: ${r.status} ${JSON.stringify(o)}`);
    };
    const native = (command: string) => async (): Promise<void> => {
      const o = (await (await api('POST', `/v1/sandboxes/${id}/sessions/${session}/run`, { command })).json()) as { exit_code: number };
      if (o.exit_code !== 0) throw new Error(`session run: ${JSON.stringify(o)}`);
    };
    // plain words need no parser; a quote and a redirection go through the session's syntax checker
    for (const command of ['true', 'echo "ok" >/dev/null']) {
      for (let i = 0; i < SESSION_WARMUP; i++) {
        await face(command)();
        await native(command)();
      }
      // one of each in turn: the host's load, which changes by the second on a shared machine, falls on both alike
      const f: number[] = [];
      const n: number[] = [];
      for (let i = 0; i < SESSION_ITER; i++) {
        n.push(...(await measure(1, 1, native(command))));
        f.push(...(await measure(1, 1, face(command))));
      }
      const [f50, f99, n50, n99] = [pct(f, 50), pct(f, 99), pct(n, 50), pct(n, 99)];
      report(
        'swerex',
        'SWE-ReX face round trip, run_in_session against the native session run of the same command (ms; aim ratio p50 <= 1.5x)',
        { command, runs: SESSION_ITER, face_p50_ms: r2(f50), face_p99_ms: r2(f99), native_p50_ms: r2(n50), native_p99_ms: r2(n99), ratio_p50: r2(f50 / n50) },
        `${command.padEnd(22)} face p50 ${f50.toFixed(2)} p99 ${f99.toFixed(2)} | native session p50 ${n50.toFixed(2)} p99 ${n99.toFixed(2)} | ` +
          `ratio p50 ${(f50 / n50).toFixed(2)}x`,
      );
    }
    await httpDelete(id);
  }

  if (ONLY.has('liveness') || ONLY.has('memory')) {
    const sandboxRss = async (): Promise<{ rss: number; pss: number; cgroup: number; procs: number }> => {
      const pids = [srv.pid, ...(await descendantsOf(srv.pid))];
      let rss = 0;
      let pss = 0;
      for (const p of pids) {
        const m = await memKb(p);
        rss += m.rss;
        pss += m.pss;
      }
      let cgroup = 0;
      for (const id of readdirSync(store.sandboxesDir)) {
        const st = await readState(store.sandboxesDir, id);
        // v2: one dir; v1: the memory controller's dir holds memory.usage_in_bytes
        for (const d of st?.cgroupDirs ?? []) {
          const v = await readFile(join(d, 'memory.current'), 'utf8').catch(() => readFile(join(d, 'memory.usage_in_bytes'), 'utf8').catch(() => ''));
          if (v !== '') cgroup += Number(v) / 1024;
        }
      }
      return { rss, pss, cgroup, procs: pids.length };
    };
    let livePath: string | undefined;
    const reportLiveness = (during: string, ts: number[], extra: Record<string, number>, note: string, key = 'sandbox'): void => {
      report(
        'liveness',
        'liveness (GET /swerex/<key>/is_alive, ms; aim p99 < 10 ms)',
        {
          route: '/swerex/<key>/is_alive',
          key,
          during,
          samples: ts.length,
          p50_ms: r2(pct(ts, 50)),
          p99_ms: r2(pct(ts, 99)),
          max_ms: r2(Math.max(...ts)),
          ...extra,
        },
        `while ${during}: p50 ${pct(ts, 50).toFixed(2)} p99 ${pct(ts, 99).toFixed(2)} max ${Math.max(...ts).toFixed(2)} (${ts.length} probes; ${note})`,
      );
    };
    // a memory limit gives each sandbox a cgroup of its own, whose usage is what it is charged
    const cgroupLimit = { limits: { memory: '1g' } };
    await new Promise((r) => setTimeout(r, 500));
    const before = await sandboxRss();
    const ids: string[] = [];
    try {
      for (let i = 0; i < HEAVY; i += 8) ids.push(...(await Promise.all(Array.from({ length: Math.min(8, HEAVY - i) }, () => httpCreate(cgroupLimit)))));
      await new Promise((r) => setTimeout(r, 1000));
      const after = await sandboxRss();
      const mb = (kb: number): number => r2(kb / 1024 / HEAVY);
      if (ONLY.has('memory'))
        report(
          'memory',
          `host memory per idle sandbox (${HEAVY} idle minus none, MB per sandbox)`,
          {
            sandboxes: HEAVY,
            rss_mb: mb(after.rss - before.rss),
            pss_mb: mb(after.pss - before.pss),
            cgroup_mb: mb(after.cgroup - before.cgroup),
            procs_per_sandbox: r2((after.procs - before.procs) / HEAVY),
          },
          `processes (server + launcher + holders + inits): RSS ${mb(after.rss - before.rss)} MB, ` +
            `PSS ${mb(after.pss - before.pss)} MB (${r2((after.procs - before.procs) / HEAVY)} processes each) | ` +
            `cgroup memory ${mb(after.cgroup - before.cgroup)} MB`,
        );

      if (ONLY.has('liveness')) {
        // SWE-ReX's liveness poll, for both kinds of key: a live sandbox's id (looked up in the
        // server's table) and an `inst:` key never used (answered without a sandbox, none made)
        const keys = { sandbox: ids[0]!, inst: 'inst:bench:never-created' };
        for (const [kind, key] of Object.entries(keys)) {
          const probe = await api('GET', `/swerex/${key}/is_alive`);
          if (probe.status !== 200) throw new Error(`is_alive ${kind} key: ${probe.status} ${await probe.text()}`);
        }
        livePath = `/swerex/${keys.sandbox}/is_alive`;
        let stop = false;
        let execs = 0;
        const load = Promise.all(
          ids.map(async (id) => {
            while (!stop) {
              await httpTrue(id);
              execs++;
            }
          }),
        );
        const t0 = performance.now();
        // both keys probed at once, each from its own worker, over the same load window
        const probes = Object.entries(keys).map(([kind, key]) => ({ kind, probe: startProbe(`${srv.url}/swerex/${key}/is_alive`, srv.token) }));
        await new Promise((r) => setTimeout(r, SECONDS * 1000));
        const results: { kind: string; ts: number[] }[] = [];
        for (const { kind, probe } of probes) results.push({ kind, ts: await probe.stop() });
        stop = true;
        await load;
        const execRate = execs / ((performance.now() - t0) / 1000);
        for (const { kind, ts } of results)
          reportLiveness(`${HEAVY} sandboxes run commands`, ts, { load_execs_per_s: r2(execRate) }, `${kind} key; load ${execRate.toFixed(0)} execs/s`, kind);
      }
    } finally {
      // the deletes come all at once, as a trainer ends a batch of rollouts; liveness meanwhile
      const liveness = livePath === undefined ? undefined : startProbe(`${srv.url}${livePath}`, srv.token);
      const t0 = performance.now();
      await Promise.allSettled(ids.map(httpDelete));
      const took = performance.now() - t0;
      const ts = await liveness?.stop();
      if (ts !== undefined && ts.length > 0)
        reportLiveness(`${HEAVY} sandboxes are deleted at once`, ts, { delete_all_ms: r2(took) }, `all deleted in ${took.toFixed(0)} ms`);
    }
  }
} finally {
  await cleanup();
}
