/**
 * Scoring a whole prediction file against a dataset, as `swebench.harness.run_evaluation` does:
 * every non-empty prediction of a known instance is graded in its own fresh environment, `jobs`
 * at a time; each instance's report.json, result.json, test_output.txt, patch.diff and eval.sh go
 * under <reportDir>/<runId>/<model>/<instance_id>/, the run summary to
 * <reportDir>/<model>.<runId>.json. Every input is checked first (run-inputs.ts): a prediction
 * for an instance the dataset lacks, a missing spec or environment stops the run before any
 * grading. Then one instance's failure never stops the run; an instance whose result.json from an
 * earlier attempt of the same run was made from the same inputs (verdict-inputs.ts) is not run
 * again (unless `force`), one whose inputs changed is graded again, and the outcome says which
 * were reused and which regraded, and why.
 */
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AbortedError, errorMessage, InvalidInputError, throwIfAborted } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { withExclusiveLock } from '../store/lock.js';
import { parseScoreInstance, type ScoreInstance } from './instance.js';
import type { Prediction } from './predictions.js';
import { makeRunSummary, ScoreResultSchema, type RunSummary, type ScoreResult } from './report.js';
import { type EnvironmentOf, type PreparedPrediction, prepareRun } from './run-inputs.js';
import type { EvalRunner } from './runner.js';
import { scoreInstance, type ScoreOutcome } from './score-instance.js';
import type { EvalSpecInput } from './spec.js';
import { runPool } from '../util/pool.js';
import { type Failure, failingTests, failureReason } from './diagnose.js';
import { type Regrade, regradeReason } from './verdict-inputs.js';

export type SpecLookup = (instance: ScoreInstance) => EvalSpecInput;
/** A runner for one instance's environment; each call of it must start from a fresh sandbox. */
/** A directory, or one per instance. */
export type FilesDir = string | ((instance: ScoreInstance) => string);

export function filesDirFor(dir: FilesDir | undefined, instance: ScoreInstance): { filesDir?: string } {
  if (dir === undefined) return {};
  return { filesDir: typeof dir === 'string' ? dir : dir(instance) };
}

export type RunnerFactory = (instance: ScoreInstance) => EvalRunner | Promise<EvalRunner>;

export interface ScoreRunOptions {
  jobs: number;
  runId: string;
  reportDir: string;
  timeoutS: number;
  /** Where patch files go inside the environment (see scoreInstance); per instance when environments share a filesystem. */
  filesDir?: FilesDir;
  /** Grade every instance again, even those with a result from an earlier attempt of this run. */
  force?: boolean;
  /**
   * What each instance is graded in (e.g. its environment's registry digest): resolved for every
   * instance before grading starts (one that fails stops the run) and part of each result's
   * inputs, so a rebuilt environment is graded again.
   */
  environmentOf?: EnvironmentOf;
  /** Called as each instance finishes, e.g. for progress lines; `regraded` when an earlier result was set aside. */
  onResult?: (result: ScoreResult, regraded: Regrade | null) => void;
  /**
   * Stops the run: evaluations in flight are killed, none starts, and the call rejects with
   * AbortedError. Finished instances keep their reports, so a rerun resumes after them.
   */
  signal?: AbortSignal;
}

export interface ScoreRunOutcome {
  summary: RunSummary;
  summaryPath: string;
  results: ScoreResult[];
  /** Instances whose result was taken from an earlier attempt of the same run id (not run again). */
  reused: string[];
  /** Instances an earlier attempt had graded from other inputs, graded again: which changed. */
  regraded: Regrade[];
  /** Every instance not resolved: reason, failing tests, its test_output.txt. */
  failures: Failure[];
}

/** One path component that cannot climb out of its directory. */
export function safeComponent(s: string, what: string): string {
  if (s === '' || s === '.' || s === '..' || s.includes('/') || s.includes('\0')) {
    throw new InvalidInputError(`${what} ${JSON.stringify(s)} cannot name a report directory`, `use a ${what} without "/", NUL, "." or ".."`);
  }
  return s;
}

/** The harness's directory name for a model. */
export function modelDirName(model: string): string {
  return safeComponent(model.replaceAll('/', '__'), 'model name');
}

/** The instance's report directory under a run, as the harness lays it out. */
export function instanceReportDir(reportDir: string, runId: string, model: string, instanceId: string): string {
  return join(reportDir, safeComponent(runId, 'run id'), modelDirName(model), safeComponent(instanceId, 'instance id'));
}

/** The lock every write of a run summary holds (see run-summary-update.ts). */
export function summaryLockPath(summaryPath: string): string {
  return `${summaryPath}.lock`;
}

/** The run summary's path: `<reportDir>/<model>.<runId>.json`. */
export function runSummaryPath(reportDir: string, runId: string, model: string): string {
  return join(reportDir, `${modelDirName(model)}.${safeComponent(runId, 'run id')}.json`);
}

/** What a graded instance leaves in its report directory (patch.diff is written before grading). */
export async function writeInstanceFiles(dir: string, outcome: Pick<ScoreOutcome, 'result' | 'log' | 'script'>): Promise<void> {
  const { result, log, script } = outcome;
  await writeAtomic(join(dir, 'eval.sh'), script);
  await writeAtomic(join(dir, 'test_output.txt'), log);
  await writeAtomic(join(dir, 'report.json'), JSON.stringify({ [result.instance_id]: result.report }, null, 4) + '\n');
  await writeAtomic(join(dir, 'result.json'), JSON.stringify(result, null, 2) + '\n');
}

export async function writeAtomic(path: string, content: string): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  await writeFile(tmp, content);
  await rename(tmp, path);
}

async function previousResult(dir: string): Promise<ScoreResult | null> {
  try {
    const r = ScoreResultSchema.safeParse(JSON.parse(await readFile(join(dir, 'result.json'), 'utf8')));
    // Infrastructure errors are retried; a graded, timed-out or non-applying patch is not.
    return r.success && r.data.status !== 'error' ? r.data : null;
  } catch (e) {
    if (isErrno(e, 'ENOENT') || e instanceof SyntaxError) return null;
    throw e;
  }
}

export async function scoreRun(
  rows: readonly unknown[],
  predictions: readonly Prediction[],
  specs: SpecLookup,
  runnerFactory: RunnerFactory,
  opts: ScoreRunOptions,
): Promise<ScoreRunOutcome> {
  safeComponent(opts.runId, 'run id');
  if (!Number.isInteger(opts.jobs) || opts.jobs < 1) throw new InvalidInputError(`jobs must be a positive integer, got ${opts.jobs}`);
  if (!(opts.timeoutS > 0)) throw new InvalidInputError(`timeout must be positive, got ${opts.timeoutS} s`);
  const instances = rows.map((r, i) => parseScoreInstance(r, `dataset row ${i + 1}`));
  const byId = new Map(instances.map((x) => [x.instance_id, x]));
  const preds = new Map(predictions.map((p) => [p.instance_id, p]));
  const model = predictions[0]?.model_name_or_path ?? 'None';
  // every input, before any grading (names too: a model no directory can be named after)
  for (const p of preds.values()) instanceReportDir(opts.reportDir, opts.runId, p.model_name_or_path, p.instance_id);
  const todo = await prepareRun(byId, [...preds.values()], specs, { environmentOf: opts.environmentOf, concurrency: Math.max(8, opts.jobs) });

  const results = new Map<string, ScoreResult>();
  const reused: string[] = [];
  const regraded: Regrade[] = [];
  const logs = new Map<string, string>();
  await runPool(todo, opts.jobs, async (p) => {
    throwIfAborted(opts.signal, 'score run');
    const { result, earlier, regrade, log } = await scoreOne(p, runnerFactory, opts);
    const id = p.instance.instance_id;
    results.set(id, result);
    if (earlier) reused.push(id);
    if (regrade !== null) regraded.push(regrade);
    if (log !== null) logs.set(id, log);
    opts.onResult?.(result, regrade);
  });

  const summary = makeRunSummary({ datasetIds: instances.map((x) => x.instance_id), predictions: preds, results });
  await mkdir(opts.reportDir, { recursive: true });
  const summaryPath = runSummaryPath(opts.reportDir, opts.runId, model);
  // under the lock evaluate's per-prediction updates take, so neither write lands inside the other's
  await withExclusiveLock(summaryLockPath(summaryPath), () => writeAtomic(summaryPath, `${JSON.stringify(summary, null, 4)}\n`));
  const ordered = todo.flatMap((p) => results.get(p.instance.instance_id) ?? []);
  const failures: Failure[] = ordered
    .filter((r) => !r.resolved)
    .map((r) => {
      const log = logs.get(r.instance_id);
      return {
        instance_id: r.instance_id,
        reason: failureReason(r),
        failing_tests: failingTests(r.report.tests_status),
        ...(log !== undefined ? { log } : {}),
      };
    })
    .sort((a, b) => a.instance_id.localeCompare(b.instance_id));
  return {
    summary,
    summaryPath,
    results: ordered,
    reused: reused.sort(),
    regraded: regraded.sort((a, b) => a.instance_id.localeCompare(b.instance_id)),
    failures,
  };
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function scoreOne(
  p: PreparedPrediction,
  runnerFactory: RunnerFactory,
  opts: ScoreRunOptions,
): Promise<{ result: ScoreResult; earlier: boolean; regrade: Regrade | null; log: string | null }> {
  const { instance, prediction: pred, spec, inputs } = p;
  const modelName = pred.model_name_or_path;
  const dir = instanceReportDir(opts.reportDir, opts.runId, modelName, instance.instance_id);
  let regrade: Regrade | null = null;
  try {
    const logPath = join(dir, 'test_output.txt');
    const earlier = opts.force === true ? null : await previousResult(dir);
    if (earlier !== null) {
      regrade = regradeReason(instance.instance_id, earlier.inputs, inputs);
      if (regrade === null) return { result: earlier, earlier: true, regrade, log: (await exists(logPath)) ? logPath : null };
    }
    await mkdir(dir, { recursive: true });
    await writeAtomic(join(dir, 'patch.diff'), pred.model_patch ?? '');
    const runner = await runnerFactory(instance);
    const outcome = await scoreInstance(instance, spec, pred.model_patch, runner, {
      timeoutMs: opts.timeoutS * 1000,
      modelName,
      ...filesDirFor(opts.filesDir, instance),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const result: ScoreResult = { ...outcome.result, inputs };
    await writeInstanceFiles(dir, { ...outcome, result });
    return { result, earlier: false, regrade, log: logPath };
  } catch (e) {
    // cancelled: no result at all, so that a rerun grades this instance
    if (e instanceof AbortedError) throw e;
    // A runner that could not be made, a full disk: this instance errored, the run goes on.
    const result: ScoreResult = {
      instance_id: instance.instance_id,
      model_name_or_path: modelName,
      status: 'error',
      resolved: false,
      applied_with: null,
      report: { patch_is_None: pred.model_patch === null, patch_exists: pred.model_patch !== null, patch_successfully_applied: false, resolved: false },
      runner: null,
      error: errorMessage(e),
    };
    const errorPath = join(dir, 'error.txt');
    await writeAtomic(errorPath, `${result.error}\n`).catch(() => undefined);
    return { result, earlier: false, regrade, log: (await exists(errorPath)) ? errorPath : null };
  }
}
