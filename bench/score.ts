/**
 * Scoring throughput and per-instance overhead, against running the same tests directly, in one run:
 *   score      scoreRun over N instances (gold patches), --jobs = cores, host runner: the eval
 *              script (apply chain, test-file reset, test patch, markers), log parsing, grading,
 *              report files; each evaluation starts from a reset tree
 *   direct     the same test command run directly in a tree already patched (no scoring at all),
 *              with the same parallelism
 * Reports instances/minute for both, their ratio, and the per-instance overhead beyond the test
 * command's own time (median and p99 of score duration - direct duration, paired per instance).
 * The sandbox's own start cost is not included here (the host runner does not isolate); see the
 * sandbox benchmark for that (~20 ms per start on these machines).
 *
 *   npx tsx bench/score.ts
 *   BENCH_INSTANCES=40 BENCH_JOBS=2 npx tsx bench/score.ts
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { calcRunnerFactory, makeCalcRepo, resetCalcRepo, type CalcRepo } from '../src/score/fixtures/calc-repo.js';
import { analyzeLog, statusMapOf } from '../src/score/log-analysis.js';
import { makeEvalScript, testCommand } from '../src/score/eval-script.js';
import { gradeTests } from '../src/score/grading.js';
import { parseScoreInstance } from '../src/score/instance.js';
import { getParser } from '../src/score/parsers/registry.js';
import { scoreRun } from '../src/score/score-run.js';
import { parseEvalSpec } from '../src/score/score-instance.js';

const N = Number(process.env['BENCH_INSTANCES'] ?? 16);
const JOBS = Number(process.env['BENCH_JOBS'] ?? availableParallelism());
const REPEATS = Number(process.env['BENCH_REPEATS'] ?? 3);

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;

async function pool<T>(items: T[], jobs: number, work: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: jobs }, async () => {
    while (next < items.length) await work(items[next++]!);
  }));
}

function runDirect(repo: CalcRepo): Promise<number> {
  const spec = parseEvalSpec(repo.spec);
  const cmd = testCommand(spec, parseScoreInstance(repo.instance).test_patch);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn('/bin/bash', ['-c', `${cmd} 2>&1`], { cwd: repo.dir, stdio: ['ignore', 'pipe', 'ignore'] });
    child.stdout.resume();
    child.on('error', reject);
    child.on('close', () => resolve(performance.now() - t0));
  });
}

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'ms-bench-score-'));
  try {
    const repos = new Map<string, CalcRepo>();
    for (let i = 0; i < N; i++) {
      const id = `bench__calc-${i}`;
      repos.set(id, await makeCalcRepo(join(root, id), id));
    }
    const list = [...repos.values()];
    const predictions = list.map((r) => ({ instance_id: String(r.instance.instance_id), model_patch: r.gold, model_name_or_path: 'bench' }));

    // Pure parts alone: script generation + log analysis + parsing + grading, on a real log.
    const one = list[0]!;
    const inst = parseScoreInstance(one.instance);
    const spec = parseEvalSpec(one.spec);

    // Warm-up (page cache, python's first start), not timed.
    await runDirect(one);

    // Rounds interleave the two contestants so that load from elsewhere hits both alike.
    const scoreWalls: number[] = [];
    const directWalls: number[] = [];
    const scoreDur = new Map<string, number[]>();
    const directDur = new Map<string, number[]>();
    const push = (m: Map<string, number[]>, k: string, v: number) => m.set(k, [...(m.get(k) ?? []), v]);
    for (let round = 0; round < REPEATS; round++) {
      const t0 = performance.now();
      const out = await scoreRun(list.map((r) => r.instance), predictions, (i) => repos.get(i.instance_id)!.spec, calcRunnerFactory(repos), {
        jobs: JOBS,
        runId: `bench${round}`,
        reportDir: join(root, 'reports'),
        timeoutS: 300,
        filesDir: (i) => join(root, 'files', i.instance_id),
      });
      scoreWalls.push(performance.now() - t0);
      if (out.summary.resolved_instances !== N) throw new Error(`expected ${N} resolved, got ${JSON.stringify(out.summary)}`);
      for (const r of out.results) push(scoreDur, r.instance_id, r.runner!.duration_ms);

      // direct: the same trees, patched beforehand (untimed), the bare test command
      for (const r of list) {
        resetCalcRepo(r);
        execFileSync('git', ['apply'], { cwd: r.dir, input: r.gold });
        execFileSync('git', ['apply'], { cwd: r.dir, input: parseScoreInstance(r.instance).test_patch });
      }
      const t1 = performance.now();
      await pool(list, JOBS, async (r) => {
        push(directDur, String(r.instance.instance_id), await runDirect(r));
      });
      directWalls.push(performance.now() - t1);
    }
    const scoreWall = quantile(scoreWalls, 0.5);
    const directWall = quantile(directWalls, 0.5);
    const allScore = [...scoreDur.values()].flat();
    const allDirect = [...directDur.values()].flat();

    const log = execFileSync('cat', [join(root, 'reports', 'bench0', 'bench', inst.instance_id, 'test_output.txt')], { encoding: 'utf8' });
    const parser = getParser(spec.parser);
    const PURE_REPS = 2000;
    const tp = performance.now();
    for (let i = 0; i < PURE_REPS; i++) {
      makeEvalScript({ instance: inst, spec, patchPath: '/tmp/p', testPatchPath: '/tmp/t' });
      const a = analyzeLog(log);
      gradeTests(statusMapOf(log, a, parser).statusMap, inst);
    }
    const pureMs = (performance.now() - tp) / PURE_REPS;

    // Paired per instance and round: the same tree, the same test command, moments apart.
    const overhead = [...scoreDur.keys()].flatMap((id) => scoreDur.get(id)!.map((d, i) => d - directDur.get(id)![i]!));
    const perMin = (wall: number) => (N / wall) * 60_000;
    console.log(`instances: ${N}, jobs: ${JOBS}, rounds: ${REPEATS} (medians over rounds), test command: ${spec.testCmd}`);
    console.log(`score:  ${perMin(scoreWall).toFixed(0)} instances/min (wall ${fmt(scoreWall)}); per-instance eval median ${fmt(quantile(allScore, 0.5))}, p99 ${fmt(quantile(allScore, 0.99))}`);
    console.log(`direct: ${perMin(directWall).toFixed(0)} instances/min (wall ${fmt(directWall)}); per-instance test median ${fmt(quantile(allDirect, 0.5))}, p99 ${fmt(quantile(allDirect, 0.99))}`);
    console.log(`throughput ratio score/direct: ${(perMin(scoreWall) / perMin(directWall)).toFixed(2)}`);
    console.log(`overhead beyond the test command, per instance: median ${fmt(quantile(overhead, 0.5))}, p99 ${fmt(quantile(overhead, 0.99))}`);
    console.log(`  of which pure (script + log analysis + parse + grade): ${(pureMs * 1000).toFixed(0)} µs`);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

await main();
