/**
 * CLI start-up against node's own, side by side in the same run (interleaved rounds, medians):
 *   - `minisandbox --version` vs `node -e 0` (target: within 1.5x);
 *   - `minisandbox run REF -- true` on an environment already in the store vs `node -e 0`
 *     (target: within node + 60 ms). The environment is a busybox root pushed to a temp registry.
 * Runs the bundle bin/setup builds (dist/cli.mjs; `npm run build:cli` first). Scale: BENCH_ITER (15).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../src/registry/local.js';
import { StorePaths } from '../src/store/paths.js';
import { pushTree } from '../src/store/push.js';

const ITER = Number(process.env.BENCH_ITER ?? 15);
const cli = resolve('dist/cli.mjs');
if (!existsSync(cli)) throw new Error('dist/cli.mjs is missing: run `npm run build:cli` first');

function timed(args: string[]): number {
  const t = performance.now();
  const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = performance.now() - t;
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} exited ${r.status}: ${r.stderr.toString()}`);
  return ms;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const work = mkdtempSync(join(tmpdir(), 'ms-bench-cli-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
try {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  const registry = join(work, 'registry');
  const store = join(work, 'store');
  await pushTree(new LocalRegistry(registry), new StorePaths(join(work, 'push')), root, { tag: 'bench/busybox' });
  const run = [cli, '--registry', registry, '--store', store, 'run', 'bench/busybox', '--', 'true'];
  timed(run); // pulls it into the store: what follows is a run on a pulled environment
  const node: number[] = [];
  const version: number[] = [];
  const runs: number[] = [];
  for (let i = 0; i < ITER; i++) {
    node.push(timed(['-e', '0']));
    version.push(timed([cli, '--version']));
    runs.push(timed(run));
  }
  const n = median(node);
  const v = median(version);
  const r = median(runs);
  console.log(`node -e 0                      median ${n.toFixed(1)} ms`);
  console.log(`minisandbox --version          median ${v.toFixed(1)} ms   ${(v / n).toFixed(2)}x node   (target <= 1.5x)`);
  console.log(`minisandbox run REF -- true    median ${r.toFixed(1)} ms   node + ${(r - n).toFixed(1)} ms   (target <= node + 60 ms)`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
