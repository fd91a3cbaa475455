/**
 * Sandbox runtime benchmark, baselines side by side in the same run:
 *   - create -> first command -> destroy latency (p50/p99) vs bare `bwrap` with equivalent flags
 *     over the same tree and vs `podman --runtime runc run --rm` of the same rootfs; as root, both
 *     over a layer laid out shifted (every sandbox in one id range) and over a real-owner layer
 *     mounted idmapped (each sandbox with its own range: what the runtime uses), interleaved;
 *   - session command round-trip;
 *   - N sandboxes alive at once: time to start all, host memory (PSS/RSS) per idle sandbox.
 * Scale: BENCH_ITER (200), BENCH_PODMAN_ITER (15; 0 skips podman), BENCH_SESSION_ITER (2000), BENCH_CONCURRENT (128).
 * Sections 2 and 3 run over the idmapped layer where the host can, else over the shifted one.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createSandbox, makeBusyboxRootfs, probeHost, type Sandbox } from '../src/sandbox/index.js';
import { childrenOf } from '../src/sandbox/proc.js';
import { probeIdmappedLayers } from '../src/sandbox/idmap.js';
import { busyboxLower, CACHE_DIR, freshStateDir } from '../test/helpers/sandbox-testkit.js';

const run = promisify(execFile);
const ITER = Number(process.env.BENCH_ITER ?? 200);
const PODMAN_ITER = Number(process.env.BENCH_PODMAN_ITER ?? 15);
const SESSION_ITER = Number(process.env.BENCH_SESSION_ITER ?? 2000);
const CONCURRENT = Number(process.env.BENCH_CONCURRENT ?? 128);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
function fmt(ms: number): string {
  return ms < 1 ? `${(ms * 1000).toFixed(0)} µs` : `${ms.toFixed(2)} ms`;
}
function spawnWait(cmd: string, args: string[]): Promise<number | null> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: 'ignore' });
    p.on('error', () => resolve(null));
    p.on('exit', (c) => resolve(c));
  });
}
async function memKb(pid: number): Promise<{ pss: number; rss: number }> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const get = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { pss: get('Pss'), rss: get('Rss') };
}

const host = await probeHost();
const lower = await busyboxLower(host.idMap);
const stateDir = await freshStateDir();
const quiet = { host, warn: () => undefined };
// the same busybox tree with its real owners (root's), for idmapped mounts
const realLower = join(CACHE_DIR, 'busybox-real');
await rm(realLower, { recursive: true, force: true });
await makeBusyboxRootfs(realLower);
const idmap = (await probeIdmappedLayers(host, realLower)).ok;
const main = idmap ? { lowerDirs: [realLower], idmapLowers: true } : { lowerDirs: [lower] };
console.log(
  `sandbox bench: ${ITER} iterations, podman ${PODMAN_ITER}, session ${SESSION_ITER}, concurrent ` +
    `${CONCURRENT}; tree ${lower}${idmap ? `, idmapped ${realLower}` : ' (no idmapped mounts here)'}`,
);

// 1. create -> first command -> destroy, shifted and idmapped interleaved
const ours: number[] = [];
const oursIdmap: number[] = [];
const cycle = async (opts: { lowerDirs: string[]; idmapLowers?: boolean }): Promise<number> => {
  const t = performance.now();
  const sb = await createSandbox({ ...opts, stateDir }, quiet);
  const o = await sb.exec(['/bin/true']);
  await sb.destroy();
  if (o.status !== 'ok' || o.exitCode !== 0) throw new Error(`exec failed: ${JSON.stringify(o)}`);
  return performance.now() - t;
};
const bwrapArgs = [
  '--ro-bind',
  lower,
  '/',
  '--proc',
  '/proc',
  '--dev',
  '/dev',
  '--tmpfs',
  '/tmp',
  '--unshare-user',
  '--unshare-pid',
  '--unshare-net',
  '--unshare-ipc',
  '--unshare-uts',
  '--cap-drop',
  'ALL',
  '--die-with-parent',
  '--new-session',
  '--clearenv',
  '--',
  '/bin/true',
];
const bw: number[] = [];
const bwrapOnce = async (): Promise<number> => {
  const t = performance.now();
  const c = await spawnWait('bwrap', bwrapArgs);
  if (c !== 0) throw new Error(`bwrap baseline failed (${c})`);
  return performance.now() - t;
};
// interleaved, so that a change in the shared machine's load hits all sides alike
for (let i = 0; i < ITER + 5; i++) {
  const a = await cycle({ lowerDirs: [lower] });
  const b = idmap ? await cycle({ lowerDirs: [realLower], idmapLowers: true }) : 0;
  const c = await bwrapOnce();
  if (i >= 5) {
    ours.push(a);
    if (idmap) oursIdmap.push(b);
    bw.push(c);
  }
}

let pod: number[] = [];
const image = 'localhost/msb-bench-busybox:latest';
try {
  if (PODMAN_ITER === 0) throw new Error('BENCH_PODMAN_ITER=0');
  const src = await mkdtemp(join(tmpdir(), 'msb-bench-rootfs-'));
  await makeBusyboxRootfs(src);
  const tarball = `${src}.tar`;
  await run('tar', ['-C', src, '-cf', tarball, '.']);
  await run('podman', ['import', tarball, image]);
  await rm(src, { recursive: true, force: true });
  await rm(tarball, { force: true });
  const podArgs = ['--runtime', 'runc', 'run', '--rm', '--network', 'none', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1000:1000', image, '/bin/true'];
  for (let i = 0; i < PODMAN_ITER + 1; i++) {
    const t = performance.now();
    const c = await spawnWait('podman', podArgs);
    if (c !== 0) throw new Error(`podman run failed (${c})`);
    if (i >= 1) pod.push(performance.now() - t);
  }
} catch (e) {
  console.log(`podman baseline unavailable: ${String(e).slice(0, 300)}`);
  pod = [];
}

console.log('\ncreate -> first command -> destroy');
console.log(`  minisandbox   p50 ${fmt(pct(ours, 50))}  p99 ${fmt(pct(ours, 99))}   (shifted layer, shared id range)`);
if (idmap) console.log(`  idmapped      p50 ${fmt(pct(oursIdmap, 50))}  p99 ${fmt(pct(oursIdmap, 99))}   (real-owner layer mounted idmapped, own id range)`);
console.log(`  bare bwrap    p50 ${fmt(pct(bw, 50))}  p99 ${fmt(pct(bw, 99))}   (run only, no overlay, no persistent sandbox)`);
if (pod.length > 0) console.log(`  podman+runc   p50 ${fmt(pct(pod, 50))}  p99 ${fmt(pct(pod, 99))}`);
console.log(`  ratio minisandbox/bwrap p50: ${(pct(ours, 50) / pct(bw, 50)).toFixed(2)}x (aim <= 2x)`);
if (idmap)
  console.log(
    `  ratio idmapped/bwrap p50: ${(pct(oursIdmap, 50) / pct(bw, 50)).toFixed(2)}x ` +
      `(aim <= 2x); idmapped/shifted ${(pct(oursIdmap, 50) / pct(ours, 50)).toFixed(2)}x`,
  );
if (pod.length > 0) console.log(`  speed-up vs podman p50: ${(pct(pod, 50) / pct(ours, 50)).toFixed(1)}x (aim >= 20x)`);

// 2. session round-trip and exec in a live sandbox
{
  const sb = await createSandbox({ ...main, stateDir }, quiet);
  await sb.run('true');
  const rt: number[] = [];
  for (let i = 0; i < SESSION_ITER; i++) {
    const t = performance.now();
    await sb.run(':');
    rt.push(performance.now() - t);
  }
  const ex: number[] = [];
  for (let i = 0; i < 50; i++) {
    const t = performance.now();
    await sb.exec(['/bin/true']);
    ex.push(performance.now() - t);
  }
  await sb.destroy();
  console.log('\nin a live sandbox');
  console.log(`  session round-trip  p50 ${fmt(pct(rt, 50))}  p99 ${fmt(pct(rt, 99))}  (aim < 1 ms)`);
  console.log(`  exec (new process)  p50 ${fmt(pct(ex, 50))}  p99 ${fmt(pct(ex, 99))}`);
}

// 3. many sandboxes alive at once
{
  const sbs: Sandbox[] = [];
  const t0 = performance.now();
  for (let i = 0; i < CONCURRENT; i += 4) {
    const batch = await Promise.all(Array.from({ length: Math.min(4, CONCURRENT - i) }, () => createSandbox({ ...main, stateDir }, quiet)));
    sbs.push(...batch);
  }
  const startAll = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 500));
  let pss = 0;
  let rss = 0;
  let procs = 0;
  for (const sb of sbs) {
    const pids = [sb.state.holderPid, sb.state.initPid, ...(await childrenOf(sb.state.initPid))];
    for (const p of pids) {
      const m = await memKb(p);
      pss += m.pss;
      rss += m.rss;
      procs++;
    }
  }
  let okCount = 0;
  for (let i = 0; i < sbs.length; i += 8) {
    const outs = await Promise.all(sbs.slice(i, i + 8).map((s) => s.exec(['/bin/true'])));
    okCount += outs.filter((o) => o.status === 'ok').length;
  }
  const t1 = performance.now();
  await Promise.all(sbs.map((s) => s.destroy()));
  const destroyAll = performance.now() - t1;
  console.log(`\n${CONCURRENT} sandboxes alive at once`);
  console.log(`  start all: ${fmt(startAll)} (${fmt(startAll / CONCURRENT)} each, 4 in flight); all answered a command: ${okCount}/${CONCURRENT}`);
  console.log(
    `  host memory per idle sandbox: PSS ${(pss / CONCURRENT / 1024).toFixed(2)} MB, RSS ` +
      `${(rss / CONCURRENT / 1024).toFixed(2)} MB (${procs / CONCURRENT} processes each; aim < 5 MB)`,
  );
  console.log(`  destroy all: ${fmt(destroyAll)}`);
}
await rm(stateDir, { recursive: true, force: true });
await rm(realLower, { recursive: true, force: true });
