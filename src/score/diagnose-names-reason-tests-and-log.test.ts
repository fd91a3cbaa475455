import { describe, expect, it } from 'vitest';
import { failingTests, failureReason, formatFailure } from './diagnose.js';
import type { TestsStatus } from './grading.js';
import { parseScoreInstance } from './instance.js';
import type { EvalRunner } from './runner.js';
import { scoreInstance } from './score-instance.js';

const ts = (f2pFail: string[], p2pFail: string[]): TestsStatus => ({
  FAIL_TO_PASS: { success: ['ok1'], failure: f2pFail },
  PASS_TO_PASS: { success: ['ok2', 'ok3'], failure: p2pFail },
  FAIL_TO_FAIL: { success: [], failure: [] },
  PASS_TO_FAIL: { success: [], failure: [] },
});

describe('failure diagnostics', () => {
  it('lists FAIL_TO_PASS failures before PASS_TO_PASS ones and counts them in the reason', () => {
    const r = { status: 'completed' as const, resolved: false, report: { tests_status: ts(['a', 'b'], ['c']) } };
    expect(failingTests(r.report.tests_status)).toEqual(['a', 'b', 'c']);
    expect(failureReason(r)).toBe('not resolved: 2 of 3 FAIL_TO_PASS fail, 1 of 3 PASS_TO_PASS fail (a test missing from the log counts as failed)');
  });

  it('gives the status and error of an ungraded run, and says when an empty patch resolves', () => {
    expect(failureReason({ status: 'error', resolved: false, error: 'ref test/x not found', report: {} })).toBe('error: ref test/x not found');
    expect(failureReason({ status: 'patch_apply_failed', resolved: false, report: {} })).toBe('patch apply failed');
    expect(failureReason({ status: 'completed', resolved: true, report: { tests_status: ts([], []) } }, false)).toMatch(/empty patch resolves/);
  });

  it('prints the first names, how many more, and the log path', () => {
    const text = formatFailure(
      { instance_id: 'x-1', kind: 'gold', run: 0, reason: 'not resolved', failing_tests: ['t1', 't2', 't3'], log: '/logs/x-1/gold-1.log' },
      2,
    );
    expect(text).toBe('x-1 (gold, run 1): not resolved\n  failing: t1, t2 (+1 more; --json lists all)\n  log: /logs/x-1/gold-1.log');
  });
});

describe('an eval that could not start', () => {
  it("gives the runner's own words as the reason, not only its status", async () => {
    const instance = parseScoreInstance({ instance_id: 'x-1', repo: 'o/r', base_commit: 'abcdef1', test_patch: '', FAIL_TO_PASS: ['t'], PASS_TO_PASS: [] });
    const runner: EvalRunner = async () => ({
      output: '[minisandbox: command could not be started in the sandbox: cannot run /bin/bash: No such file or directory]\n',
      status: 'infra_error',
      exitCode: null,
      truncated: false,
    });
    const { result } = await scoreInstance(instance, { testCmd: 'true', parser: 'pytest' }, null, runner, { timeoutMs: 1000 });
    expect(result.status).toBe('error');
    expect(failureReason(result)).toBe(
      'error: the eval runner reported infra_error: command could not be started in the sandbox: cannot run /bin/bash: No such file or directory',
    );
  });
});
