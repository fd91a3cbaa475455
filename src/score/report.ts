/**
 * Report files. `report.json` per instance and the run summary use SWE-bench's field names so
 * existing tooling reads them; `result.json` adds what the harness keeps only in its logs
 * (how the patch applied, timeouts, runner status, timings).
 */
import { z } from 'zod';
import { TestsStatusSchema } from './grading.js';
import { GIT_APPLY_CMDS } from './markers.js';
import { VerdictInputsSchema } from './verdict-inputs.js';

export const InstanceReportSchema = z.object({
  patch_is_None: z.boolean(),
  patch_exists: z.boolean(),
  patch_successfully_applied: z.boolean(),
  resolved: z.boolean(),
  tests_status: TestsStatusSchema.optional(),
});
export type InstanceReport = z.infer<typeof InstanceReportSchema>;

/** report.json: `{ "<instance_id>": InstanceReport }`, as the harness writes it. */
export const ReportFileSchema = z.record(z.string(), InstanceReportSchema);
export type ReportFile = z.infer<typeof ReportFileSchema>;

/**
 * completed: the tests ran and were graded; patch_apply_failed: no command in the apply chain
 * took the patch; timeout: the eval script ran past its limit; error: anything else that kept the
 * tests from being graded (runner failure, out of memory, markers missing, bad spec).
 */
export const ScoreStatusSchema = z.enum(['completed', 'patch_apply_failed', 'timeout', 'error']);
export type ScoreStatus = z.infer<typeof ScoreStatusSchema>;

/**
 * How one prediction's grading went, in the one vocabulary of result.json, the run summary's id
 * lists, `score`'s lines, the server's evaluate answer and the Python client's `Evaluation.status`:
 * a ScoreStatus, or empty_patch for a prediction with nothing to apply (not run, as in the
 * harness). completed, empty_patch and patch_apply_failed are verdicts on the patch (resolved or
 * not); timeout and error are not: the patch could not be judged, and a reward taken from them
 * would be made up.
 */
export const EvaluationStatusSchema = z.enum([...ScoreStatusSchema.options, 'empty_patch']);
export type EvaluationStatus = z.infer<typeof EvaluationStatusSchema>;

export const RunnerStatusSchema = z.enum(['ok', 'timeout', 'oom', 'killed', 'infra_error']);

export const ScoreResultSchema = z.object({
  instance_id: z.string(),
  model_name_or_path: z.string(),
  status: ScoreStatusSchema,
  resolved: z.boolean(),
  applied_with: z.enum(GIT_APPLY_CMDS).nullable(),
  report: InstanceReportSchema,
  runner: z
    .object({
      status: RunnerStatusSchema,
      exit_code: z.number().int().nullable(),
      truncated: z.boolean(),
      duration_ms: z.number().nonnegative(),
    })
    .nullable(),
  /**
   * Not in the harness: the instance's test names found in the log only under their other
   * unittest spelling (Python <= 3.10 `test_x (mod.Class)` vs >= 3.11 `test_x (mod.Class.test_x)`).
   */
  other_spelling: z.array(z.string()).optional(),
  error: z.string().optional(),
  /** Not in the harness: digests of what decided the verdict (verdict-inputs.ts), for reuse by a rerun. */
  inputs: VerdictInputsSchema.optional(),
});
export type ScoreResult = z.infer<typeof ScoreResultSchema>;

export const RunSummarySchema = z.object({
  total_instances: z.number().int(),
  submitted_instances: z.number().int(),
  completed_instances: z.number().int(),
  resolved_instances: z.number().int(),
  unresolved_instances: z.number().int(),
  empty_patch_instances: z.number().int(),
  error_instances: z.number().int(),
  completed_ids: z.array(z.string()),
  incomplete_ids: z.array(z.string()),
  empty_patch_ids: z.array(z.string()),
  submitted_ids: z.array(z.string()),
  resolved_ids: z.array(z.string()),
  unresolved_ids: z.array(z.string()),
  error_ids: z.array(z.string()),
  /** Not in the harness (which refuses the whole run): predictions naming no dataset instance. */
  unknown_ids: z.array(z.string()),
  /** Not in the harness: the error ids broken down. */
  patch_apply_failed_ids: z.array(z.string()),
  timeout_ids: z.array(z.string()),
  schema_version: z.literal(2),
});
export type RunSummary = z.infer<typeof RunSummarySchema>;

const sorted = (xs: Iterable<string>) => [...xs].sort();

/**
 * The harness's run report: instances without a prediction are incomplete, empty patches are
 * neither run nor completed, a graded instance is resolved or unresolved, anything else errored.
 */
export function makeRunSummary(input: {
  datasetIds: readonly string[];
  predictions: ReadonlyMap<string, { model_patch: string | null }>;
  results: ReadonlyMap<string, Pick<ScoreResult, 'status' | 'resolved'>>;
}): RunSummary {
  const dataset = new Set(input.datasetIds);
  const ids = {
    completed: [] as string[],
    incomplete: [] as string[],
    empty: [] as string[],
    resolved: [] as string[],
    unresolved: [] as string[],
    error: [] as string[],
    applyFailed: [] as string[],
    timeout: [] as string[],
  };
  for (const id of dataset) {
    const pred = input.predictions.get(id);
    if (pred === undefined) {
      ids.incomplete.push(id);
      continue;
    }
    if (pred.model_patch === null || pred.model_patch === '') {
      ids.empty.push(id);
      continue;
    }
    const r = input.results.get(id);
    if (r === undefined || r.status !== 'completed') {
      ids.error.push(id);
      if (r?.status === 'patch_apply_failed') ids.applyFailed.push(id);
      if (r?.status === 'timeout') ids.timeout.push(id);
      continue;
    }
    ids.completed.push(id);
    (r.resolved ? ids.resolved : ids.unresolved).push(id);
  }
  const submitted = [...input.predictions.keys()];
  return {
    total_instances: dataset.size,
    submitted_instances: submitted.length,
    completed_instances: ids.completed.length,
    resolved_instances: ids.resolved.length,
    unresolved_instances: ids.unresolved.length,
    empty_patch_instances: ids.empty.length,
    error_instances: ids.error.length,
    completed_ids: sorted(ids.completed),
    incomplete_ids: sorted(ids.incomplete),
    empty_patch_ids: sorted(ids.empty),
    submitted_ids: sorted(submitted),
    resolved_ids: sorted(ids.resolved),
    unresolved_ids: sorted(ids.unresolved),
    error_ids: sorted(ids.error),
    unknown_ids: sorted(submitted.filter((id) => !dataset.has(id))),
    patch_apply_failed_ids: sorted(ids.applyFailed),
    timeout_ids: sorted(ids.timeout),
    schema_version: 2,
  };
}
