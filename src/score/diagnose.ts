/**
 * Why an instance failed, in a form a person reads first (pure): the reason, the first failing
 * test names and where the log is. `score` and `validate` print these per failing instance; their
 * `--json` output keeps the full lists.
 */
import { z } from 'zod';
import type { TestsStatus } from './grading.js';
import type { ScoreStatus } from './report.js';

export const FailureSchema = z.object({
  instance_id: z.string(),
  /** For validate: which patch (gold, empty) and run; absent for score. */
  kind: z.string().optional(),
  run: z.number().int().optional(),
  reason: z.string(),
  /** Every failing test of the instance's lists (FAIL_TO_PASS, then PASS_TO_PASS), dataset spelling. */
  failing_tests: z.array(z.string()),
  /** The eval log (test output) of this run, when one was written. */
  log: z.string().optional(),
});
export type Failure = z.infer<typeof FailureSchema>;

/** Tests that kept an instance from resolving: FAIL_TO_PASS failures first, then PASS_TO_PASS. */
export function failingTests(ts: TestsStatus | undefined): string[] {
  if (ts === undefined) return [];
  return [...ts.FAIL_TO_PASS.failure, ...ts.PASS_TO_PASS.failure];
}

/** One line of reason for a graded-or-not result that did not come out as expected. */
export function failureReason(
  r: { status: ScoreStatus; resolved: boolean; error?: string | undefined; report: { tests_status?: TestsStatus | undefined } },
  expectResolved = true,
): string {
  if (r.status !== 'completed') return `${r.status.replaceAll('_', ' ')}${r.error ? `: ${r.error}` : ''}`;
  if (!expectResolved) return r.resolved ? 'the empty patch resolves: the tests do not test the fix' : 'not resolved (as expected)';
  const ts = r.report.tests_status;
  if (r.resolved || ts === undefined) return r.resolved ? 'resolved' : 'not resolved';
  const f = ts.FAIL_TO_PASS.failure.length;
  const p = ts.PASS_TO_PASS.failure.length;
  const parts = [
    f > 0 ? `${f} of ${f + ts.FAIL_TO_PASS.success.length} FAIL_TO_PASS fail` : '',
    p > 0 ? `${p} of ${p + ts.PASS_TO_PASS.success.length} PASS_TO_PASS fail` : '',
  ];
  return `not resolved: ${parts.filter((s) => s !== '').join(', ')} (a test missing from the log counts as failed)`;
}

/** The human lines for one failure: at most `max` test names. */
export function formatFailure(f: Failure, max = 5): string {
  const head = `${f.instance_id}${f.kind !== undefined ? ` (${f.kind}${f.run !== undefined ? `, run ${f.run + 1}` : ''})` : ''}: ${f.reason}`;
  const lines = [head];
  if (f.failing_tests.length > 0) {
    const more = f.failing_tests.length - max;
    lines.push(`  failing: ${f.failing_tests.slice(0, max).join(', ')}${more > 0 ? ` (+${more} more; --json lists all)` : ''}`);
  }
  if (f.log !== undefined) lines.push(`  log: ${f.log}`);
  return lines.join('\n');
}
