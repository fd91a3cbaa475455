/**
 * Rows of the other multilingual datasets, read as SWE-bench rows (pure): every command then
 * builds, grades and validates them as it does SWE-bench's, and score writes the SWE-bench
 * harness's reports for them.
 *
 * - Multi-SWE-bench (`org`, `repo`, `number`, `base.sha`, `fix_patch`, `test_patch` and per-test
 *   maps `{name: {run, test, fix}}`): the instance is `<org>__<repo>-<number>`, the fix patch is
 *   the gold patch. FAIL_TO_PASS are the tests its harness counts as fixed (`f2p_tests`,
 *   `s2p_tests`, `n2p_tests`: passing with the fix, not with the test patch alone), PASS_TO_PASS
 *   the `p2p_tests`. Without a version, the pull request's number is one (as SWE-bench
 *   Multilingual numbers its per-instance versions). Converted dumps that already carry
 *   `instance_id`, `base_commit` or the lists keep them.
 * - SWE-smith task instances (an `image_name`, a bug `patch`, no `test_patch`): the base commit
 *   has the bug committed and the tests are already in the tree, so the gold patch is the bug
 *   patch reversed (its harness applies it with `git apply --reverse`); the bug patch is kept as
 *   `bug_patch`. Without a version, the mirror's commit (`owner__repo.<commit>`) is one.
 *
 * Every other row is taken as SWE-bench's.
 */
import { z } from 'zod';
import { reversePatch } from './reverse-patch.js';

export type RowFormat = 'swe-bench' | 'multi-swe-bench' | 'swe-smith';

const TestMapSchema = z.record(z.string(), z.unknown()).default({});

const MultiSweBenchSchema = z.looseObject({
  org: z.string().min(1).optional(),
  repo: z.string().min(1),
  number: z.union([z.number().int(), z.string().regex(/^\d+$/)]).optional(),
  base: z.looseObject({ sha: z.string() }).optional(),
  fix_patch: z.string(),
  f2p_tests: TestMapSchema,
  s2p_tests: TestMapSchema,
  n2p_tests: TestMapSchema,
  p2p_tests: TestMapSchema,
  resolved_issues: z.array(z.looseObject({ title: z.string().optional(), body: z.string().nullable().optional() })).optional(),
});

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Which dataset a parsed JSON row comes from, by the fields only that dataset has. */
export function rowFormat(value: unknown): RowFormat {
  if (!isRecord(value)) return 'swe-bench';
  if (typeof value.fix_patch === 'string' && !('patch' in value)) return 'multi-swe-bench';
  if (typeof value.image_name === 'string' && typeof value.patch === 'string' && !('test_patch' in value)) return 'swe-smith';
  return 'swe-bench';
}

function fromMultiSweBench(value: Record<string, unknown>): Record<string, unknown> {
  const r = MultiSweBenchSchema.safeParse(value);
  // a malformed row goes on as it is: the SWE-bench schema then names the field it lacks
  if (!r.success) return value;
  const m = r.data;
  const repo = m.org !== undefined && !m.repo.includes('/') ? `${m.org}/${m.repo}` : m.repo;
  const number = m.number === undefined ? undefined : String(m.number);
  const issues = (m.resolved_issues ?? []).map((i) => [i.title ?? '', i.body ?? ''].filter((s) => s !== '').join('\n\n'));
  const out: Record<string, unknown> = { ...value, repo, patch: m.fix_patch };
  out.instance_id ??= `${repo.replace('/', '__')}-${number ?? ''}`;
  if (out.base_commit === undefined && m.base !== undefined) out.base_commit = m.base.sha;
  if (out.version === undefined && number !== undefined) out.version = number;
  out.FAIL_TO_PASS ??= [...new Set([...Object.keys(m.f2p_tests), ...Object.keys(m.s2p_tests), ...Object.keys(m.n2p_tests)])];
  out.PASS_TO_PASS ??= Object.keys(m.p2p_tests);
  if (out.problem_statement === undefined && issues.length > 0) out.problem_statement = issues.join('\n\n');
  return out;
}

function fromSweSmith(value: Record<string, unknown>, where: string): Record<string, unknown> {
  const bug = value.patch as string;
  const out: Record<string, unknown> = { ...value, patch: reversePatch(bug, `${where}: patch`), bug_patch: bug, test_patch: '' };
  const commit = typeof value.repo === 'string' ? /\.([0-9a-f]{7,40})$/.exec(value.repo)?.[1] : undefined;
  if (out.version === undefined && commit !== undefined) out.version = commit;
  return out;
}

/** The row as SWE-bench's schema has it, with the row's own other fields kept; `where` names it in errors. */
export function asSweBenchRow(value: unknown, where: string): unknown {
  if (!isRecord(value)) return value;
  switch (rowFormat(value)) {
    case 'multi-swe-bench':
      return fromMultiSweBench(value);
    case 'swe-smith':
      return fromSweSmith(value, where);
    case 'swe-bench':
      return value;
  }
}
