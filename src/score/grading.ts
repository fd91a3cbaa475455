/**
 * SWE-bench's grading rules, as pure functions of a status map and the instance's test lists.
 * FAIL_TO_PASS passes on PASSED or XFAIL; PASS_TO_PASS also on SKIPPED; a test missing from the
 * log failed; an empty list scores 1.0; resolved means both score 1.0.
 */
import { z } from 'zod';
import type { StatusMap, TestStatus } from './status.js';

/**
 * The other unittest spelling of a test name, or null when the name is not unittest's
 * `method (dotted.path)`. Python <= 3.10 prints `test_x (module.Class)`, Python >= 3.11
 * `test_x (module.Class.test_x)`; SWE-bench rows were made with the older one, so a newer Python in
 * an environment would otherwise turn every such test into "missing from the log".
 */
export function otherUnittestSpelling(name: string): string | null {
  const m = /^([A-Za-z_][A-Za-z0-9_]*) \(([A-Za-z_][A-Za-z0-9_.]*)\)$/.exec(name);
  if (!m) return null;
  const [, method, path] = m as unknown as [string, string, string];
  const suffix = `.${method}`;
  return path.endsWith(suffix) && path.length > suffix.length ? `${method} (${path.slice(0, -suffix.length)})` : `${method} (${path}${suffix})`;
}

/**
 * The status of a dataset's test name in a log: under that name, or else under its other
 * unittest spelling (and only that: nothing else is matched loosely). `viaOther` says which.
 */
export function lookupStatus(name: string, sm: StatusMap): { status: TestStatus | undefined; viaOther: boolean } {
  const exact = sm.get(name);
  if (exact !== undefined) return { status: exact, viaOther: false };
  const other = otherUnittestSpelling(name);
  const s = other === null ? undefined : sm.get(other);
  return { status: s, viaOther: s !== undefined };
}

export function testPassed(name: string, sm: StatusMap): boolean {
  const s = lookupStatus(name, sm).status;
  return s === 'PASSED' || s === 'XFAIL';
}

export function testMaintained(name: string, sm: StatusMap): boolean {
  return testPassed(name, sm) || lookupStatus(name, sm).status === 'SKIPPED';
}

/** Names of the instance's lists found in the log only under their other unittest spelling. */
export function namesMatchedByOtherSpelling(sm: StatusMap, gold: GoldLists): string[] {
  const all = [...gold.FAIL_TO_PASS, ...gold.PASS_TO_PASS, ...(gold.FAIL_TO_FAIL ?? []), ...(gold.PASS_TO_FAIL ?? [])];
  return [...new Set(all.filter((t) => lookupStatus(t, sm).viaOther))].sort();
}

export const OutcomeSchema = z.object({ success: z.array(z.string()), failure: z.array(z.string()) });
export type Outcome = z.infer<typeof OutcomeSchema>;

export const TestsStatusSchema = z.object({
  FAIL_TO_PASS: OutcomeSchema,
  PASS_TO_PASS: OutcomeSchema,
  FAIL_TO_FAIL: OutcomeSchema,
  PASS_TO_FAIL: OutcomeSchema,
});
export type TestsStatus = z.infer<typeof TestsStatusSchema>;

export interface GoldLists {
  FAIL_TO_PASS: readonly string[];
  PASS_TO_PASS: readonly string[];
  FAIL_TO_FAIL?: readonly string[];
  PASS_TO_FAIL?: readonly string[];
}

function split(tests: readonly string[], ok: (t: string) => boolean): Outcome {
  const out: Outcome = { success: [], failure: [] };
  for (const t of tests) (ok(t) ? out.success : out.failure).push(t);
  return out;
}

/**
 * Per-list outcomes. Every test lands in success or failure: anything not passed (or, for
 * PASS_TO_PASS, not maintained) failed, including a test the log never mentions.
 */
export function gradeTests(sm: StatusMap, gold: GoldLists): TestsStatus {
  const passed = (t: string) => testPassed(t, sm);
  return {
    FAIL_TO_PASS: split(gold.FAIL_TO_PASS, passed),
    PASS_TO_PASS: split(gold.PASS_TO_PASS, (t) => testMaintained(t, sm)),
    FAIL_TO_FAIL: split(gold.FAIL_TO_FAIL ?? [], passed),
    PASS_TO_FAIL: split(gold.PASS_TO_FAIL ?? [], passed),
  };
}

/** Share of a list that succeeded; an empty list scores 1. */
export function rate(o: Outcome): number {
  const total = o.success.length + o.failure.length;
  return total === 0 ? 1 : o.success.length / total;
}

export const ResolvedStatusSchema = z.enum(['RESOLVED_FULL', 'RESOLVED_PARTIAL', 'RESOLVED_NO']);
export type ResolvedStatus = z.infer<typeof ResolvedStatusSchema>;

export function resolutionStatus(ts: TestsStatus): ResolvedStatus {
  const f2p = rate(ts.FAIL_TO_PASS);
  const p2p = rate(ts.PASS_TO_PASS);
  if (f2p === 1 && p2p === 1) return 'RESOLVED_FULL';
  if (f2p > 0 && f2p < 1 && p2p === 1) return 'RESOLVED_PARTIAL';
  return 'RESOLVED_NO';
}
