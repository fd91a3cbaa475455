/**
 * CLI start-up against node's own, side by side in the same run (interleaved rounds, medians):
 *   - `minisandbox --version` vs `node -e 0` (target: within 1.5x);
 *   - `minisandbox run REF -- true` on an environment already in the store vs `node -e 0`
 *     (target: within node + 60 ms). The environment is a busybox root pushed to a temp registry.
 * Runs the bundle bin/setup builds (dist/cli.cjs; `npm run bench:cli` rebuilds it first). Scale: BENCH_ITER (15).
 * BENCH_COMPARE_CLI=other/cli.cjs (or an older cli.mjs) times another bundle (e.g. an older commit's) in the same rounds.
 * Besides wall time it prints CPU time (user + system, children included, from /usr/bin/time),
 * which a loaded machine inflates far less than wall time. Where the time goes, phase by phase:
 * `MINISANDBOX_TIMING=1 node dist/cli.cjs ... run REF -- true` (src/util/timing.ts).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../src/registry/local.js';
import { StorePaths } from '../src/store/paths.js';
import { pushTree } from '../src/publish/push.js';

const ITER = Number(process.env.BENCH_ITER ?? 15);
const cli = resolve('dist/cli.cjs');
if (!existsSync(cli)) throw new Error('dist/cli.cjs is missing: run `npm run build:cli` first');

interface Sample {
  wall: number;
  cpu: number;
}

/** Wall and CPU milliseconds of `node ARGS`, or of PROGRAM ARGS (GNU time writes its line last on stderr). */
function timed(args: string[], program: string = process.execPath): Sample {
  const t = performance.now();
  const r = spawnSync('/usr/bin/time', ['-f', 'MSBTIME %U %S', program, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const wall = performance.now() - t;
  const m = /MSBTIME ([\d.]+) ([\d.]+)\s*$/.exec(r.stderr.toString());
  if (r.status !== 0 || m === null) throw new Error(`${program} ${args.join(' ')} exited ${r.status}: ${r.stderr.toString()}`);
  return { wall, cpu: (Number(m[1]) + Number(m[2])) * 1000 };
}

/**
 * node's own start where NODE_EXTRA_CA_CERTS is set: node parses that file before any code runs,
 * and bin/minisandbox defers it for the sandbox commands (src/util/extra-ca.ts), so the command as
 * typed is also compared with a node that does not load it (like for like).
 */
const extraCa = process.env.NODE_EXTRA_CA_CERTS;
function timedWithoutCa(args: string[]): Sample {
  return timed(['-u', 'NODE_EXTRA_CA_CERTS', process.execPath, ...args], '/usr/bin/env');
}

/** The command people type: bin/minisandbox, the shell script npm links, which execs node on the bundle. */
const binScript = resolve('bin/minisandbox');

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
  const other = process.env.BENCH_COMPARE_CLI;
  const clis = other === undefined ? [cli] : [cli, resolve(other)];
  const runArgs = (c: string): string[] => [c, '--registry', registry, '--store', store, 'run', 'bench/busybox', '--', 'true'];
  timed(runArgs(cli)); // pulls it into the store: what follows is a run on a pulled environment
  const node: Sample[] = [];
  const version = clis.map((): Sample[] => []);
  const runs = clis.map((): Sample[] => []);
  const viaBin: Sample[] = [];
  const nodeWithoutCa: Sample[] = [];
  const runsWithoutCa: Sample[] = [];
  for (let i = 0; i < ITER; i++) {
    node.push(timed(['-e', '0']));
    if (extraCa !== undefined) nodeWithoutCa.push(timedWithoutCa(['-e', '0']));
    clis.forEach((c, k) => {
      version[k]!.push(timed([c, '--version']));
      runs[k]!.push(timed(runArgs(c)));
    });
    viaBin.push(timed(runArgs(cli).slice(1), binScript));
    if (extraCa !== undefined) runsWithoutCa.push(timedWithoutCa(runArgs(cli)));
  }
  const n = { wall: median(node.map((x) => x.wall)), cpu: median(node.map((x) => x.cpu)) };
  const f = (x: number): string => `${x.toFixed(0).padStart(5)} ms`;
  console.log(`node -e 0                    wall ${f(n.wall)}  cpu ${f(n.cpu)}`);
  clis.forEach((c, k) => {
    const v = { wall: median(version[k]!.map((x) => x.wall)), cpu: median(version[k]!.map((x) => x.cpu)) };
    const r = { wall: median(runs[k]!.map((x) => x.wall)), cpu: median(runs[k]!.map((x) => x.cpu)) };
    console.log(`${c}:`);
    console.log(
      `  --version                  wall ${f(v.wall)}  cpu ${f(v.cpu)}   ` +
        `${(v.wall / n.wall).toFixed(2)}x node wall, ${(v.cpu / n.cpu).toFixed(2)}x cpu (target <= 1.5x)`,
    );
    console.log(
      `  run REF -- true (pulled)   wall ${f(r.wall)}  cpu ${f(r.cpu)}   node + ${(r.wall - n.wall).toFixed(0)} ` +
        `ms wall, + ${(r.cpu - n.cpu).toFixed(0)} ms cpu (target <= node + 60 ms)`,
    );
  });
  const b = { wall: median(viaBin.map((x) => x.wall)), cpu: median(viaBin.map((x) => x.cpu)) };
  console.log(
    `bin/minisandbox run REF -- true wall ${f(b.wall)}  cpu ${f(b.cpu)}   node + ${(b.wall - n.wall).toFixed(0)} ms wall, + ` +
      `${(b.cpu - n.cpu).toFixed(0)} ms cpu (the shell script's programs included; in a checkout it also runs find over src/)`,
  );
  if (extraCa !== undefined) {
    const u = { wall: median(nodeWithoutCa.map((x) => x.wall)), cpu: median(nodeWithoutCa.map((x) => x.cpu)) };
    console.log(
      `node -e 0 without NODE_EXTRA_CA_CERTS wall ${f(u.wall)}  cpu ${f(u.cpu)}   ` +
        `(node itself parses ${extraCa} at start: ${(n.wall - u.wall).toFixed(0)} ms wall)`,
    );
    console.log(
      `  bin/minisandbox run, like for like (neither loads the CA at start): node + ${(b.wall - u.wall).toFixed(0)} ms wall, ` +
        `+ ${(b.cpu - u.cpu).toFixed(0)} ms cpu`,
    );
    // the bundle run without the shell script (an installed package's start, less the script's sh)
    const d = { wall: median(runsWithoutCa.map((x) => x.wall)), cpu: median(runsWithoutCa.map((x) => x.cpu)) };
    console.log(
      `  node dist/cli.cjs run, like for like (neither loads the CA at start): node + ${(d.wall - u.wall).toFixed(0)} ms wall, ` +
        `+ ${(d.cpu - u.cpu).toFixed(0)} ms cpu`,
    );
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
