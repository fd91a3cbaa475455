/**
 * Grading one prediction as `score` grades each of a run's (the reward call of a trainer): an
 * empty patch is not run, any other is graded in the fresh environment the runner makes; with a
 * run to record into, the instance's report files go where `score` puts them and the run summary
 * gains the instance.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { ScoreInstance } from './instance.js';
import type { EvaluationStatus, ReportFile, RunSummary, ScoreResult } from './report.js';
import { recordInRunSummary } from './run-summary-update.js';
import type { EvalRunner } from './runner.js';
import { instanceReportDir, runSummaryPath, writeAtomic, writeInstanceFiles } from './score-run.js';
import { parseEvalSpec, scoreInstance } from './score-instance.js';
import type { EvalSpecInput } from './spec.js';
import { verdictInputs } from './verdict-inputs.js';

export interface EvaluateOptions {
  timeoutS: number;
  /** The prediction's model_name_or_path; default "None", as the harness names a missing one. */
  modelName?: string;
  /** Where the patch files go inside the environment (see scoreInstance). */
  filesDir?: string;
  /** Record the outcome in a run: report files under <reportDir>/<runId>/<model>/<instance_id>/, the summary <reportDir>/<model>.<runId>.json. */
  record?: { reportDir: string; runId: string; datasetIds: readonly string[] };
  /**
   * What the patch was graded in (its environment's digest), asked once grading is done and
   * recorded in result.json, so that a `score` rerun of the run can reuse it.
   */
  environment?: () => string | undefined;
  signal?: AbortSignal;
}

export interface EvaluateOutcome {
  /** The harness's report.json object: `{ "<instance_id>": {...} }`. */
  report: ReportFile;
  /** null for an empty patch (not run). */
  result: ScoreResult | null;
  /** How grading went: timeout and error are no verdict on the patch (see EvaluationStatusSchema). */
  status: EvaluationStatus;
  /** Why it was not graded (timeout, error) or did not apply, when it says. */
  error?: string;
  summary?: RunSummary;
  summaryPath?: string;
}

/**
 * `runner` is called only when there is something to run, so a caller can make the environment
 * then; its errors (no capacity, no such environment) are thrown, not graded, since they say
 * nothing of the patch.
 */
export async function evaluatePrediction(
  instance: ScoreInstance,
  specInput: EvalSpecInput,
  patch: string | null,
  runner: () => Promise<EvalRunner>,
  opts: EvaluateOptions,
): Promise<EvaluateOutcome> {
  const model = opts.modelName ?? 'None';
  const id = instance.instance_id;
  const rec = opts.record;
  // names are checked before any work: a bad run id or model is bad input, not a failed grading
  const dir = rec === undefined ? null : instanceReportDir(rec.reportDir, rec.runId, model, id);
  const spec = parseEvalSpec(specInput);
  let result: ScoreResult | null = null;
  let report: ReportFile;
  if (patch === null || patch === '') {
    // as the harness: an empty patch is not run, and resolves nothing
    report = { [id]: { patch_is_None: patch === null, patch_exists: patch !== null, patch_successfully_applied: false, resolved: false } };
  } else {
    if (dir !== null) {
      await mkdir(dir, { recursive: true });
      await writeAtomic(join(dir, 'patch.diff'), patch);
    }
    const outcome = await scoreInstance(instance, spec, patch, await runner(), {
      timeoutMs: opts.timeoutS * 1000,
      modelName: model,
      ...(opts.filesDir === undefined ? {} : { filesDir: opts.filesDir }),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    result = { ...outcome.result, inputs: verdictInputs(instance, spec, patch, opts.environment?.()) };
    if (dir !== null) await writeInstanceFiles(dir, { ...outcome, result });
    report = { [id]: result.report };
  }
  const graded: EvaluateOutcome = {
    report,
    result,
    status: result?.status ?? 'empty_patch',
    ...(result?.error === undefined ? {} : { error: result.error }),
  };
  if (rec === undefined) return graded;
  const summaryPath = runSummaryPath(rec.reportDir, rec.runId, model);
  const summary = await recordInRunSummary(summaryPath, rec.datasetIds, id, patch, result);
  return { ...graded, summary, summaryPath };
}
