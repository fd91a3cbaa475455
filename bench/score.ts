/**
 * Scoring throughput and per-instance overhead, against running the same tests directly, in one run,
 * on the project's hermetic dataset (recipes/test: a shell project whose `sh run_tests.sh` prints
 * pytest-style lines, so the test command itself costs milliseconds and scoring's own cost shows):
 *   score      scoreRun of the gold patches, --jobs = cores, host runner: eval script (apply chain,
 *              test-file reset, test patch, markers), log parsing, grading, report files; every
 *              evaluation starts from a tree reset to the base commit (what a fresh sandbox gives)
 *   direct     the same test command run directly in trees already patched (no scoring at all),
 *              with the same parallelism
 * Prints instances/minute for both and their ratio, and the per-instance overhead beyond the test
 * command's own time (median and p99 of score duration - direct duration, paired per instance and
 * round). Rounds alternate which contestant goes first.
 * Then, through the real runtime, one instance evaluated BENCH_SANDBOX_RUNS times:
 *   sandbox    scoreInstance with a fresh rootless sandbox per evaluation (network off) over a Debian
 *              layer + the instance layer: create, write files, eval script, grade, destroy
 *   chroot     the same test command in a plain chroot of the same tree (an overlay of the same
 *              layers mounted on the host, patched beforehand, untimed)
 *
 *   npx tsx bench/score.ts
 *   BENCH_COPIES=50 BENCH_JOBS=2 BENCH_REPEATS=5 npx tsx bench/score.ts
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadDataset } from '../src/dataset/read.js';
import { loadSpecs, lookupSpec } from '../src/dataset/specs.js';
import { evalSpecFromDataset } from '../src/score/dataset-spec.js';
import { makeEvalScript, testCommand } from '../src/score/eval-script.js';
import { gradeTests } from '../src/score/grading.js';
import { hostEvalRunner } from '../src/score/host-runner.js';
import { parseScoreInstance, type ScoreInstance } from '../src/score/instance.js';
import { analyzeLog, statusMapOf } from '../src/score/log-analysis.js';
import { getParser } from '../src/score/parsers/registry.js';
import { parseEvalSpec } from '../src/score/score-instance.js';
import { scoreRun, type RunnerFactory } from '../src/score/score-run.js';
import type { EvalSpec } from '../src/score/spec.js';
import { createSandbox, probeHost, shiftCopyTree } from '../src/sandbox/index.js';
import { CACHE_DIR, debianLower, freshStateDir } from '../test/helpers/sandbox-testkit.js';
import { asEvalSandbox, sandboxEvalRunner } from '../src/score/sandbox-runner.js';
import { scoreInstance } from '../src/score/score-instance.js';

const COPIES = Number(process.env.BENCH_COPIES ?? 15);
const JOBS = Number(process.env.BENCH_JOBS ?? availableParallelism());
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
const SANDBOX_RUNS = Number(process.env.BENCH_SANDBOX_RUNS ?? 12);
const RECIPES = resolve(import.meta.dirname, '../recipes/test');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const git = (cwd: string, ...args: string[]) => execFileSync('git', args, { cwd, env: GIT_ENV, stdio: ['pipe', 'ignore', 'inherit'] });

async function pool<T>(items: T[], jobs: number, work: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: jobs }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

interface Task {
  instance: ScoreInstance;
  spec: EvalSpec;
  dir: string;
}

function runDirect(t: Task): Promise<number> {
  const cmd = testCommand(t.spec, t.instance.test_patch);
  return new Promise((done, fail) => {
    const t0 = performance.now();
    const child = spawn('/bin/bash', ['-c', `${cmd} 2>&1`], { cwd: t.dir, stdio: ['ignore', 'pipe', 'ignore'] });
    child.stdout.resume();
    child.on('error', fail);
    child.on('close', () => done(performance.now() - t0));
  });
}

function resetTree(t: Task): void {
  git(t.dir, 'reset', '-q', '--hard', t.instance.base_commit);
  git(t.dir, 'clean', '-qfdx');
}

async function sandboxSection(
  root: string,
  origin: string,
  row: Awaited<ReturnType<typeof loadDataset>>[number]['row'],
  specs: Awaited<ReturnType<typeof loadSpecs>>,
): Promise<void> {
  const host = await probeHost();
  const debian = await debianLower(host.idMap);
  const instance = parseScoreInstance(row);
  const spec = parseEvalSpec(evalSpecFromDataset(lookupSpec(specs, row.repo, row.version, row.instance_id)));
  const layer = join(root, 'layer');
  const testbed = join(layer, spec.workdir.slice(1));
  git(root, 'clone', '-q', '--no-checkout', origin, testbed);
  git(testbed, 'checkout', '-q', instance.base_commit);
  const shifted = await shiftCopyTree(layer, join(CACHE_DIR, `score-bench-layer-${process.pid}-${host.idMap.uidStart}`), host.idMap);
  const stateDir = await freshStateDir();
  try {
    const runner = sandboxEvalRunner(async () =>
      asEvalSandbox(await createSandbox({ lowerDirs: [debian, shifted], stateDir, network: 'none', config: { workdir: spec.workdir } }, { host })),
    );
    const runs = Array.from({ length: SANDBOX_RUNS }, (_, i) => i);
    const sbDur: number[] = [];
    const t0 = performance.now();
    await pool(runs, JOBS, async () => {
      const t = performance.now();
      const { result } = await scoreInstance(instance, spec, instance.patch, runner, { timeoutMs: 120_000 });
      if (!result.resolved) throw new Error(`sandbox run did not resolve: ${JSON.stringify(result)}`);
      sbDur.push(performance.now() - t);
    });
    const sbWall = performance.now() - t0;

    const cmd = testCommand(spec, instance.test_patch);
    const chDur: number[] = [];
    let chWall = 0;
    await pool(runs, JOBS, async (i) => {
      const d = join(root, `chroot-${i}`);
      const merged = join(d, 'merged');
      execFileSync('mkdir', ['-p', join(d, 'upper'), join(d, 'work'), merged]);
      execFileSync('mount', [
        '-t',
        'overlay',
        'overlay',
        '-o',
        `lowerdir=${shifted}:${debian},upperdir=${join(d, 'upper')},workdir=${join(d, 'work')}`,
        merged,
      ]);
      try {
        for (const p of [instance.patch, instance.test_patch]) {
          execFileSync('chroot', [merged, 'git', '-c', 'safe.directory=*', '-C', spec.workdir, 'apply', '-'], {
            input: p,
            stdio: ['pipe', 'ignore', 'inherit'],
          });
        }
        const t = performance.now();
        await new Promise<void>((done, fail) => {
          const child = spawn('chroot', [merged, '/bin/sh', '-c', `cd ${spec.workdir} && ${cmd} 2>&1`], { stdio: ['ignore', 'pipe', 'ignore'] });
          child.stdout.resume();
          child.on('error', fail);
          child.on('close', () => done());
        });
        const took = performance.now() - t;
        chDur.push(took);
        chWall += took / JOBS;
      } finally {
        execFileSync('umount', [merged]);
        rmSync(d, { recursive: true, force: true });
      }
    });
    const perMin = (n: number, wall: number) => (n / wall) * 60_000;
    console.log(
      `sandbox: ${SANDBOX_RUNS} evaluations, jobs ${JOBS}: ${perMin(SANDBOX_RUNS, sbWall).toFixed(0)} ` +
        `instances/min; per evaluation median ${fmt(quantile(sbDur, 0.5))}, p99 ${fmt(quantile(sbDur, 0.99))}`,
    );
    console.log(
      `chroot:  the bare test command: per run median ${fmt(quantile(chDur, 0.5))}, p99 ` +
        `${fmt(quantile(chDur, 0.99))} (~${perMin(SANDBOX_RUNS, chWall).toFixed(0)} instances/min of test time alone)`,
    );
    console.log(
      `sandbox scoring overhead beyond the test command: median ${fmt(quantile(sbDur, 0.5) - quantile(chDur, 0.5))}; ` +
        `throughput ratio sandbox/chroot-test-time ${(perMin(SANDBOX_RUNS, sbWall) / perMin(SANDBOX_RUNS, chWall)).toFixed(3)}`,
    );
  } finally {
    await rm(stateDir, { recursive: true, force: true });
    await rm(shifted, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'ms-bench-score-'));
  try {
    const origin = join(root, 'origin');
    execFileSync(join(RECIPES, 'make-repo.sh'), [origin], { stdio: ['ignore', 'ignore', 'inherit'] });
    const rows = (await loadDataset(join(RECIPES, 'dataset.jsonl'))).map((r) => r.row);
    const specs = await loadSpecs(join(RECIPES, 'specs.yaml'));
    const tasks = new Map<string, Task>();
    for (let copy = 0; copy < COPIES; copy++) {
      for (const row of rows) {
        const instance = parseScoreInstance({ ...row, instance_id: `${row.instance_id}-c${copy}` });
        const dir = join(root, instance.instance_id);
        git(root, 'clone', '-q', '--no-checkout', origin, dir);
        git(dir, 'checkout', '-q', instance.base_commit);
        const spec = parseEvalSpec({ ...evalSpecFromDataset(lookupSpec(specs, row.repo, row.version, row.instance_id)), workdir: dir });
        tasks.set(instance.instance_id, { instance, spec, dir });
      }
    }
    const list = [...tasks.values()];
    const N = list.length;
    const predictions = list.map((t) => ({ instance_id: t.instance.instance_id, model_patch: t.instance.patch, model_name_or_path: 'bench' }));
    const factory: RunnerFactory = (instance) => {
      const host = hostEvalRunner();
      return (files, script, opts) => {
        resetTree(tasks.get(instance.instance_id)!);
        return host(files, script, opts);
      };
    };

    const scoreWalls: number[] = [];
    const directWalls: number[] = [];
    const scoreDur = new Map<string, number[]>();
    const directDur = new Map<string, number[]>();
    const push = (m: Map<string, number[]>, k: string, v: number) => m.set(k, [...(m.get(k) ?? []), v]);
    const scoreRound = async (round: number) => {
      const t0 = performance.now();
      const out = await scoreRun(
        list.map((t) => t.instance),
        predictions,
        (i) => tasks.get(i.instance_id)!.spec,
        factory,
        {
          jobs: JOBS,
          runId: `bench${round}`,
          reportDir: join(root, 'reports'),
          timeoutS: 300,
          filesDir: (i) => join(root, 'files', i.instance_id),
        },
      );
      scoreWalls.push(performance.now() - t0);
      if (out.summary.resolved_instances !== N) throw new Error(`expected ${N} resolved, got ${JSON.stringify(out.summary)}`);
      for (const r of out.results) push(scoreDur, r.instance_id, r.runner!.duration_ms);
    };
    const directRound = async () => {
      for (const t of list) {
        resetTree(t);
        execFileSync('git', ['apply'], { cwd: t.dir, input: t.instance.patch, env: GIT_ENV });
        execFileSync('git', ['apply'], { cwd: t.dir, input: t.instance.test_patch, env: GIT_ENV });
      }
      const t1 = performance.now();
      await pool(list, JOBS, async (t) => {
        push(directDur, t.instance.instance_id, await runDirect(t));
      });
      directWalls.push(performance.now() - t1);
    };
    await runDirect(list[0]!); // warm-up, not timed
    for (let round = 0; round < REPEATS; round++) {
      if (round % 2 === 0) {
        await scoreRound(round);
        await directRound();
      } else {
        await directRound();
        await scoreRound(round);
      }
    }

    // The pure part alone: script generation + log analysis + parsing + grading, on a real log.
    const one = list[0]!;
    const log = execFileSync('cat', [join(root, 'reports', 'bench0', 'bench', one.instance.instance_id, 'test_output.txt')], { encoding: 'utf8' });
    const parser = getParser(one.spec.parser);
    const PURE_REPS = 2000;
    const tp = performance.now();
    for (let i = 0; i < PURE_REPS; i++) {
      makeEvalScript({ instance: one.instance, spec: one.spec, patchPath: '/tmp/p', testPatchPath: '/tmp/t' });
      gradeTests(statusMapOf(log, analyzeLog(log), parser).statusMap, one.instance);
    }
    const pureMs = (performance.now() - tp) / PURE_REPS;

    const scoreWall = quantile(scoreWalls, 0.5);
    const directWall = quantile(directWalls, 0.5);
    const allScore = [...scoreDur.values()].flat();
    const allDirect = [...directDur.values()].flat();
    const overhead = [...scoreDur.keys()].flatMap((id) => scoreDur.get(id)!.map((d, i) => d - directDur.get(id)![i]!));
    const perMin = (wall: number) => (N / wall) * 60_000;
    console.log(
      `instances: ${N} (recipes/test x${COPIES}), jobs: ${JOBS}, rounds: ${REPEATS}, test command: ${one.spec.testCmd}; ` +
        `load average ${execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ')}`,
    );
    console.log(
      `score:  ${perMin(scoreWall).toFixed(0)} instances/min (median wall ${fmt(scoreWall)}); ` +
        `per-instance eval median ${fmt(quantile(allScore, 0.5))}, p99 ${fmt(quantile(allScore, 0.99))}`,
    );
    console.log(
      `direct: ${perMin(directWall).toFixed(0)} instances/min (median wall ${fmt(directWall)}); ` +
        `per-instance test median ${fmt(quantile(allDirect, 0.5))}, p99 ${fmt(quantile(allDirect, 0.99))}`,
    );
    console.log(`throughput ratio score/direct: ${(perMin(scoreWall) / perMin(directWall)).toFixed(3)}`);
    console.log(`overhead beyond the test command, per instance: median ${fmt(quantile(overhead, 0.5))}, p99 ${fmt(quantile(overhead, 0.99))}`);
    console.log(`  of which pure (script + log analysis + parse + grade): ${(pureMs * 1000).toFixed(0)} µs`);
    try {
      await sandboxSection(root, origin, rows[0]!, specs);
    } catch (e) {
      console.log(`sandbox section skipped: ${(e as Error).message}`);
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

await main();
