import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { getParser } from './parsers/registry.js';
import { gradeTests, lookupStatus, namesMatchedByOtherSpelling, otherUnittestSpelling, rate, resolutionStatus } from './grading.js';
import type { StatusMap, TestStatus } from './status.js';

const sm = (o: Record<string, TestStatus>): StatusMap => new Map(Object.entries(o));

describe('grading rules (SWE-bench)', () => {
  it('FAIL_TO_PASS passes on PASSED or XFAIL only', () => {
    const r = gradeTests(sm({ a: 'PASSED', b: 'XFAIL', c: 'SKIPPED', d: 'FAILED', e: 'ERROR' }), { FAIL_TO_PASS: ['a', 'b', 'c', 'd', 'e'], PASS_TO_PASS: [] });
    expect(r.FAIL_TO_PASS).toEqual({ success: ['a', 'b'], failure: ['c', 'd', 'e'] });
  });

  it('PASS_TO_PASS also accepts SKIPPED', () => {
    const r = gradeTests(sm({ a: 'PASSED', b: 'XFAIL', c: 'SKIPPED', d: 'FAILED', e: 'ERROR' }), { FAIL_TO_PASS: [], PASS_TO_PASS: ['a', 'b', 'c', 'd', 'e'] });
    expect(r.PASS_TO_PASS).toEqual({ success: ['a', 'b', 'c'], failure: ['d', 'e'] });
  });

  it('a test missing from the log failed, in either list', () => {
    const r = gradeTests(sm({ other: 'PASSED' }), { FAIL_TO_PASS: ['gone'], PASS_TO_PASS: ['also_gone'] });
    expect(r.FAIL_TO_PASS.failure).toEqual(['gone']);
    expect(r.PASS_TO_PASS.failure).toEqual(['also_gone']);
    expect(resolutionStatus(r)).toBe('RESOLVED_NO');
  });

  it('an empty list scores 1.0, so an instance with both lists empty resolves', () => {
    expect(rate({ success: [], failure: [] })).toBe(1);
    const r = gradeTests(new Map(), { FAIL_TO_PASS: [], PASS_TO_PASS: [] });
    expect(resolutionStatus(r)).toBe('RESOLVED_FULL');
  });

  it('resolved needs both lists at 1.0; some FAIL_TO_PASS with all PASS_TO_PASS is partial', () => {
    const gold = { FAIL_TO_PASS: ['f1', 'f2'], PASS_TO_PASS: ['p1'] };
    expect(resolutionStatus(gradeTests(sm({ f1: 'PASSED', f2: 'PASSED', p1: 'PASSED' }), gold))).toBe('RESOLVED_FULL');
    expect(resolutionStatus(gradeTests(sm({ f1: 'PASSED', f2: 'FAILED', p1: 'PASSED' }), gold))).toBe('RESOLVED_PARTIAL');
    expect(resolutionStatus(gradeTests(sm({ f1: 'PASSED', f2: 'PASSED', p1: 'FAILED' }), gold))).toBe('RESOLVED_NO');
    expect(resolutionStatus(gradeTests(sm({ f1: 'FAILED', f2: 'FAILED', p1: 'PASSED' }), gold))).toBe('RESOLVED_NO');
  });

  it('FAIL_TO_FAIL and PASS_TO_FAIL are graded like FAIL_TO_PASS when given, empty otherwise', () => {
    const r = gradeTests(sm({ x: 'PASSED', y: 'SKIPPED' }), { FAIL_TO_PASS: [], PASS_TO_PASS: [], FAIL_TO_FAIL: ['x'], PASS_TO_FAIL: ['y'] });
    expect(r.FAIL_TO_FAIL).toEqual({ success: ['x'], failure: [] });
    expect(r.PASS_TO_FAIL).toEqual({ success: [], failure: ['y'] });
    expect(gradeTests(new Map(), { FAIL_TO_PASS: [], PASS_TO_PASS: [] }).FAIL_TO_FAIL).toEqual({ success: [], failure: [] });
  });
});

describe('unittest names across Python versions', () => {
  const old = 'test_sum (calc.tests.SumTests)';
  const newer = 'test_sum (calc.tests.SumTests.test_sum)';

  it('spells a name the other way in both directions, and only unittest names', () => {
    expect(otherUnittestSpelling(old)).toBe(newer);
    expect(otherUnittestSpelling(newer)).toBe(old);
    expect(otherUnittestSpelling('tests/test_x.py::test_sum')).toBeNull();
    expect(otherUnittestSpelling('test_sum')).toBeNull();
  });

  it('grades a <= 3.10 dataset name against a >= 3.11 log, and the reverse, and counts them', () => {
    const gold = { FAIL_TO_PASS: [old], PASS_TO_PASS: ['test_a (m.C)', 'tests/t.py::exact'] };
    const log = sm({ [newer]: 'PASSED', 'test_a (m.C.test_a)': 'PASSED', 'tests/t.py::exact': 'PASSED' });
    const r = gradeTests(log, gold);
    expect(resolutionStatus(r)).toBe('RESOLVED_FULL');
    expect(namesMatchedByOtherSpelling(log, gold)).toEqual(['test_a (m.C)', old]);
    const reverse = gradeTests(sm({ [old]: 'PASSED' }), { FAIL_TO_PASS: [newer], PASS_TO_PASS: [] });
    expect(reverse.FAIL_TO_PASS.success).toEqual([newer]);
  });

  it('an exact name wins over the other spelling, and a name matching neither stays missing', () => {
    expect(lookupStatus(old, sm({ [old]: 'FAILED', [newer]: 'PASSED' }))).toEqual({ status: 'FAILED', viaOther: false });
    const r = gradeTests(
      sm({ 'test_sum (calc.tests.Other.test_sum)': 'PASSED', 'test_sum (calc.tests)': 'PASSED', 'test_summ (calc.tests.SumTests.test_summ)': 'PASSED' }),
      { FAIL_TO_PASS: [old], PASS_TO_PASS: [] },
    );
    expect(r.FAIL_TO_PASS.failure).toEqual([old]);
    expect(namesMatchedByOtherSpelling(sm({}), { FAIL_TO_PASS: [old], PASS_TO_PASS: [] })).toEqual([]);
  });
});

describe('multilingual logs grade by the same rules (the harness grades SWE-bench Multilingual pass-and-fail)', () => {
  const log = (parser: string, file: string) => getParser(parser)(readFileSync(join(import.meta.dirname, 'fixtures', file), 'utf8'));

  it('go: a skipped test fails FAIL_TO_PASS and keeps PASS_TO_PASS; a failed subtest fails both', () => {
    const r = gradeTests(log('gotest', 'go-test-v.log'), {
      FAIL_TO_PASS: ['TestAdd', 'TestSkipped', 'TestTable/with/slash_&_more'],
      PASS_TO_PASS: ['TestTable/negative', 'TestSkipped', 'TestTable'],
    });
    expect(r.FAIL_TO_PASS).toEqual({ success: ['TestAdd'], failure: ['TestSkipped', 'TestTable/with/slash_&_more'] });
    expect(r.PASS_TO_PASS).toEqual({ success: ['TestTable/negative', 'TestSkipped'], failure: ['TestTable'] });
  });

  it('rust: an ignored or should_panic test is missing from the log, so it fails either list', () => {
    const r = gradeTests(log('cargo', 'cargo-test.log'), {
      FAIL_TO_PASS: ['tests::adds', 'tests::panics_as_expected'],
      PASS_TO_PASS: ['tests::slow', 'tests::nested::deep_test'],
    });
    expect(r.FAIL_TO_PASS.failure).toEqual(['tests::panics_as_expected']);
    expect(r.PASS_TO_PASS).toEqual({ success: ['tests::nested::deep_test'], failure: ['tests::slow'] });
    expect(resolutionStatus(r)).toBe('RESOLVED_NO');
  });

  it('java: a skipped maven test passes (its build succeeded); a test the log never ran fails', () => {
    const r = gradeTests(log('maven', 'maven-per-test.log'), {
      FAIL_TO_PASS: ['com.example.CalcTest#testIgnored'],
      PASS_TO_PASS: ['com.example.CalcTest#testAdd', 'com.example.CalcTest#testNeverRun'],
    });
    expect(r.FAIL_TO_PASS.success).toEqual(['com.example.CalcTest#testIgnored']);
    expect(r.PASS_TO_PASS.failure).toEqual(['com.example.CalcTest#testNeverRun']);
    expect(resolutionStatus(r)).toBe('RESOLVED_NO');
  });

  it('a fully passing multilingual instance resolves', () => {
    const r = gradeTests(log('phpunit', 'phpunit-testdox.log'), {
      FAIL_TO_PASS: ['Support Str > Slugifies text'],
      PASS_TO_PASS: ['None > Adds numbers', 'None > Skipped one'],
    });
    expect(resolutionStatus(r)).toBe('RESOLVED_FULL');
  });
});
