/**
 * Scoring one instance: build the eval script, have the injected runner run it in a fresh
 * environment, read the log and grade it. This is the reward API: a rollout's patch (the session's
 * diff) goes in, a SWE-bench report comes out.
 */
import { errorMessage, InvalidInputError, throwIfAborted } from '../errors.js';
import { gitDirWrite } from './diff-files.js';
import { makeEvalScript } from './eval-script.js';
import { APPLY_PATCH_FAIL } from './markers.js';
import { gradeTests, namesMatchedByOtherSpelling, resolutionStatus } from './grading.js';
import { parseScoreInstance, type ScoreInstance, type ScoreInstanceInput } from './instance.js';
import { analyzeLog, statusMapOf } from './log-analysis.js';
import { getParser } from './parsers/registry.js';
import type { InstanceReport, ScoreResult, ScoreStatus } from './report.js';
import type { EvalFile, EvalRunner, EvalRunResult } from './runner.js';
import { EvalSpecSchema, type EvalSpecInput } from './spec.js';
import { z } from 'zod';

export interface ScoreInstanceOptions {
  timeoutMs: number;
  /** Where, inside the environment, the patch files are written; default /tmp/minisandbox-eval. */
  filesDir?: string;
  modelName?: string;
  /** Cancels the grading: the eval script is killed and the call rejects with AbortedError (code ABORTED). */
  signal?: AbortSignal;
}

export interface ScoreOutcome {
  result: ScoreResult;
  /** The whole eval log (the harness's test_output.txt), with the harness's timeout note appended. */
  log: string;
  /** The script that was run (the harness's eval.sh). */
  script: string;
}

export function parseEvalSpec(spec: EvalSpecInput) {
  const r = EvalSpecSchema.safeParse(spec);
  if (!r.success) throw new InvalidInputError(`eval spec: ${z.prettifyError(r.error)}`, 'a spec needs testCmd and parser; workdir is absolute');
  return r.data;
}

/**
 * Grades `patch` (null: no prediction; '' or null: nothing is applied and the tests run on the
 * base tree, which is what `validate` needs for the empty-patch check) against `instance`.
 * Throws only for bad input (row, spec, parser name); every runtime failure is a status.
 */
export async function scoreInstance(
  instanceInput: ScoreInstance | ScoreInstanceInput,
  specInput: EvalSpecInput,
  patch: string | null,
  runner: EvalRunner,
  opts: ScoreInstanceOptions,
): Promise<ScoreOutcome> {
  const instance = parseScoreInstance(instanceInput, `instance ${String((instanceInput as { instance_id?: unknown }).instance_id)}`);
  const spec = parseEvalSpec(specInput);
  const parser = getParser(spec.parser);
  const dir = (opts.filesDir ?? '/tmp/minisandbox-eval').replace(/\/+$/, '');
  const hasPatch = patch !== null && patch !== '';
  const patchPath = hasPatch ? `${dir}/patch.diff` : null;
  const testPatchPath = `${dir}/test.patch`;
  const files: EvalFile[] = [{ path: testPatchPath, content: instance.test_patch }];
  if (patchPath !== null) files.push({ path: patchPath, content: patch! });
  const script = makeEvalScript({ instance, spec, patchPath, testPatchPath });

  throwIfAborted(opts.signal, `score ${instance.instance_id}`);
  const started = performance.now();
  let run: EvalRunResult;
  let infraError: string | undefined;
  const intoGitDir = hasPatch ? gitDirWrite(patch!) : null;
  try {
    run =
      intoGitDir !== null
        ? { output: `${APPLY_PATCH_FAIL}\n[minisandbox: refused, the patch writes inside .git: ${intoGitDir}]\n`, status: 'ok', exitCode: 1, truncated: false }
        : await runner(files, script, { timeoutMs: opts.timeoutMs, signal: opts.signal });
  } catch (e) {
    infraError = errorMessage(e);
    run = { output: `[minisandbox: the eval runner failed: ${infraError}]\n`, status: 'infra_error', exitCode: null, truncated: false };
  }
  // a run cut short by the caller is no grade at all
  throwIfAborted(opts.signal, `score ${instance.instance_id}`);
  const durationMs = performance.now() - started;
  let log = run.output;
  if (run.status === 'timeout') log += `\n\nTimeout error: ${Math.round(opts.timeoutMs / 1000)} seconds exceeded.`;

  const analysis = analyzeLog(log);
  const { found, statusMap } = statusMapOf(log, analysis, parser);
  let status: ScoreStatus;
  let error: string | undefined;
  if (run.status === 'timeout') {
    status = 'timeout';
    error = `the eval script ran past ${opts.timeoutMs} ms`;
  } else if (run.status !== 'ok') {
    status = 'error';
    // the runner's own words (e.g. "cannot run /bin/bash") are the reason a person needs first
    const said = /\[minisandbox: ([^\]\n]+)\]\s*$/.exec(run.output)?.[1];
    error = infraError ?? `the eval runner reported ${run.status}${said !== undefined ? `: ${said}` : ''}`;
  } else if (analysis.applyFailed) {
    status = 'patch_apply_failed';
    error = 'no command of the apply chain could apply the patch';
  } else if (!found) {
    status = 'error';
    error = analysis.badCodes.length > 0 ? `the log holds ${analysis.badCodes.join(', ')}` : 'the test output markers are missing from the log';
  } else status = 'completed';

  const graded = status === 'completed';
  const testsStatus = graded ? gradeTests(statusMap, instance) : undefined;
  const otherSpelling = graded ? namesMatchedByOtherSpelling(statusMap, instance) : [];
  const resolved = testsStatus !== undefined && resolutionStatus(testsStatus) === 'RESOLVED_FULL';
  const report: InstanceReport = {
    patch_is_None: patch === null,
    patch_exists: patch !== null,
    patch_successfully_applied: graded,
    resolved,
    ...(testsStatus === undefined ? {} : { tests_status: testsStatus }),
  };
  const result: ScoreResult = {
    instance_id: instance.instance_id,
    model_name_or_path: opts.modelName ?? 'None',
    status,
    resolved,
    applied_with: analysis.appliedWith,
    report,
    runner: { status: run.status, exit_code: run.exitCode, truncated: run.truncated, duration_ms: Math.round(durationMs) },
    ...(otherSpelling.length > 0 ? { other_spelling: otherSpelling } : {}),
    ...(error === undefined ? {} : { error }),
  };
  return { result, log, script };
}
