/**
 * Validating a dataset before training: on every run the gold patch must resolve its instance and
 * an empty patch must not; an instance whose outcome changes between runs is flaky. Both kinds
 * make a reward that says nothing about the agent, so they are listed to be fixed or excluded.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { errorMessage } from '../errors.js';
import { runPool } from '../util/pool.js';
import type { TestsStatus } from './grading.js';
import { parseScoreInstance, type ScoreInstance } from './instance.js';
import type { ScoreResult } from './report.js';
import { checkSpecs } from './run-inputs.js';
import { scoreInstance } from './score-instance.js';
import type { EvalSpec } from './spec.js';
import { filesDirFor, type FilesDir, type RunnerFactory, safeComponent, type SpecLookup } from './score-run.js';
import { failingTests, failureReason, FailureSchema } from './diagnose.js';

export const PatchKindSchema = z.enum(['gold', 'empty']);
export type PatchKind = z.infer<typeof PatchKindSchema>;

export interface ValidationObservation {
  instance_id: string;
  kind: PatchKind;
  /** 0-based run number. */
  run: number;
  result: Pick<ScoreResult, 'status' | 'resolved' | 'error'> & { report: { tests_status?: TestsStatus | undefined } };
  /** Where this run's eval log was written, if it was. */
  log?: string;
}

export const FlakySchema = z.object({
  instance_id: z.string(),
  kind: PatchKindSchema,
  /** Per run, in run order: resolved or the status that kept it from being graded. */
  outcomes: z.array(z.string()),
  /** Tests whose success/failure differed between runs. */
  tests: z.array(z.string()),
});

export const ValidationReportSchema = z.object({
  runs: z.number().int(),
  total_instances: z.number().int(),
  ok_ids: z.array(z.string()),
  /** The gold patch failed to resolve on at least one run (including timeouts and apply failures). */
  gold_unresolved_ids: z.array(z.string()),
  /** The empty patch resolved on at least one run: the tests do not test the fix. */
  empty_resolved_ids: z.array(z.string()),
  /** Some run could not be graded at all (runner error, timeout, patch apply failure). */
  error_ids: z.array(z.string()),
  flaky: z.array(FlakySchema),
  /** Why each ungraded run was not graded. */
  errors: z.array(z.object({ instance_id: z.string(), kind: PatchKindSchema, run: z.number().int(), status: z.string(), error: z.string() })),
  /** Every run that did not come out as expected: reason, all failing tests, log path. */
  failures: z.array(FailureSchema),
});
export type ValidationReport = z.infer<typeof ValidationReportSchema>;

function outcomeOf(r: ValidationObservation['result']): string {
  return r.status === 'completed' ? (r.resolved ? 'resolved' : 'unresolved') : r.status;
}

/** Test name -> "list:success|failure" for one run. */
function testOutcomes(ts: TestsStatus | undefined): Map<string, string> {
  const m = new Map<string, string>();
  if (ts === undefined) return m;
  for (const [list, o] of Object.entries(ts)) {
    for (const t of o.success) m.set(`${list}:${t}`, 'success');
    for (const t of o.failure) m.set(`${list}:${t}`, 'failure');
  }
  return m;
}

export function validateResults(observations: readonly ValidationObservation[]): ValidationReport {
  const groups = new Map<string, ValidationObservation[]>();
  const ids = new Set<string>();
  let runs = 0;
  for (const o of observations) {
    ids.add(o.instance_id);
    runs = Math.max(runs, o.run + 1);
    const key = `${o.instance_id}\0${o.kind}`;
    const g = groups.get(key) ?? [];
    g.push(o);
    groups.set(key, g);
  }
  const gold = new Set<string>();
  const empty = new Set<string>();
  const errors = new Set<string>();
  const flaky: z.infer<typeof FlakySchema>[] = [];
  for (const g of groups.values()) {
    g.sort((a, b) => a.run - b.run);
    const { instance_id, kind } = g[0]!;
    for (const o of g) {
      if (o.result.status !== 'completed') errors.add(instance_id);
      if (kind === 'gold' && !(o.result.status === 'completed' && o.result.resolved)) gold.add(instance_id);
      if (kind === 'empty' && o.result.status === 'completed' && o.result.resolved) empty.add(instance_id);
    }
    const outcomes = g.map((o) => outcomeOf(o.result));
    const perRun = g.map((o) => testOutcomes(o.result.report.tests_status));
    const names = new Set(perRun.flatMap((m) => [...m.keys()]));
    // A test graded in one run and absent from another (run not graded) is not counted: the outcome column shows that.
    const graded = perRun.filter((m) => m.size > 0);
    const changed = [...names].filter((n) => new Set(graded.map((m) => m.get(n) ?? 'missing')).size > 1).map((n) => n.slice(n.indexOf(':') + 1));
    if (new Set(outcomes).size > 1 || changed.length > 0) flaky.push({ instance_id, kind, outcomes, tests: [...new Set(changed)].sort() });
  }
  const flakyIds = new Set(flaky.map((f) => f.instance_id));
  const sorted = (s: Iterable<string>) => [...s].sort();
  return {
    runs,
    total_instances: ids.size,
    ok_ids: sorted([...ids].filter((id) => !gold.has(id) && !empty.has(id) && !errors.has(id) && !flakyIds.has(id))),
    gold_unresolved_ids: sorted(gold),
    empty_resolved_ids: sorted(empty),
    error_ids: sorted(errors),
    errors: observations
      .filter((o) => o.result.status !== 'completed')
      .map((o) => ({ instance_id: o.instance_id, kind: o.kind, run: o.run, status: o.result.status, error: o.result.error ?? '' }))
      .sort((a, b) => a.instance_id.localeCompare(b.instance_id) || a.kind.localeCompare(b.kind) || a.run - b.run),
    flaky: flaky.sort((a, b) => a.instance_id.localeCompare(b.instance_id) || a.kind.localeCompare(b.kind)),
    failures: observations
      .filter((o) => (o.kind === 'gold' ? !(o.result.status === 'completed' && o.result.resolved) : o.result.status !== 'completed' || o.result.resolved))
      .sort((a, b) => a.instance_id.localeCompare(b.instance_id) || a.kind.localeCompare(b.kind) || a.run - b.run)
      .map((o) => ({
        instance_id: o.instance_id,
        kind: o.kind,
        run: o.run,
        reason: failureReason(o.result, o.kind === 'gold'),
        // an empty patch that resolves has no failing test: what matters is that it passes
        failing_tests: o.kind === 'gold' ? failingTests(o.result.report.tests_status) : [],
        ...(o.log !== undefined ? { log: o.log } : {}),
      })),
  };
}

export interface ValidateOptions {
  runs: number;
  jobs: number;
  timeoutS: number;
  filesDir?: FilesDir;
  /** Where each run's eval log goes: `<logDir>/<instance_id>/<kind>-run<N>.log`. */
  logDir?: string;
  onObservation?: (o: ValidationObservation) => void;
}

/** Scores every instance's gold and empty patch `runs` times, each in a fresh environment. */
export async function validateInstances(
  rows: readonly unknown[],
  specs: SpecLookup,
  runnerFactory: RunnerFactory,
  opts: ValidateOptions,
): Promise<ValidationReport> {
  const instances = rows.map((r, i) => parseScoreInstance(r, `dataset row ${i + 1}`));
  // a missing or bad spec is one error before any run, not one error per instance after the others ran
  const evalSpecs = await checkSpecs(instances, specs);
  const tasks: { instance: ScoreInstance; spec: EvalSpec; kind: PatchKind; run: number }[] = [];
  for (let run = 0; run < opts.runs; run++) {
    instances.forEach((instance, i) => {
      for (const kind of PatchKindSchema.options) tasks.push({ instance, spec: evalSpecs[i]!, kind, run });
    });
  }
  const observations: ValidationObservation[] = [];
  await runPool(tasks, opts.jobs, async ({ instance, spec, kind, run }) => {
    let result: ValidationObservation['result'];
    let log: string | undefined;
    try {
      const runner = await runnerFactory(instance);
      const out = await scoreInstance(instance, spec, kind === 'gold' ? instance.patch : null, runner, {
        timeoutMs: opts.timeoutS * 1000,
        modelName: kind,
        ...filesDirFor(opts.filesDir, instance),
      });
      result = out.result;
      if (opts.logDir !== undefined) {
        const dir = join(opts.logDir, safeComponent(instance.instance_id, 'instance id'));
        await mkdir(dir, { recursive: true });
        log = join(dir, `${kind}-run${run + 1}.log`);
        await writeFile(log, out.log);
      }
    } catch (e) {
      result = { status: 'error', resolved: false, report: {}, error: errorMessage(e) };
    }
    const o: ValidationObservation = { instance_id: instance.instance_id, kind, run, result, ...(log !== undefined ? { log } : {}) };
    observations.push(o);
    opts.onObservation?.(o);
  });
  return validateResults(observations);
}
