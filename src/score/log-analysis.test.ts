import { describe, expect, it } from 'vitest';
import { analyzeLog, statusMapOf } from './log-analysis.js';
import { parsePytest } from './parsers/pytest.js';

const start = "+ : '>>>>> Start Test Output'";
const end = "+ : '>>>>> End Test Output'";

describe('reading an eval log', () => {
  it('finds which apply command took the patch and the test section between the markers', () => {
    const log = [
      '+ git apply --verbose /tmp/p',
      'error: patch failed',
      '+ git apply --verbose --reject /tmp/p',
      "+ echo '>>>>> Applied Patch (git apply --verbose --reject)'",
      '>>>>> Applied Patch (git apply --verbose --reject)',
      start,
      'PASSED t::a',
      end,
      'PASSED t::outside',
    ].join('\n');
    const a = analyzeLog(log);
    expect(a.appliedWith).toBe('git apply --verbose --reject');
    expect(a.applyFailed).toBe(false);
    expect(a.testOutput).toBe("'\nPASSED t::a\n+ : '");
    expect(Object.fromEntries(statusMapOf(log, a, parsePytest).statusMap)).toEqual({ 't::a': 'PASSED' });
  });

  it('test output cannot claim the patch applied, and an apply failure voids grading', () => {
    const log = ['>>>>> Patch Apply Failed', start, '>>>>> Applied Patch (git apply --verbose)', 'PASSED t::a', end].join('\n');
    const a = analyzeLog(log);
    expect(a.appliedWith).toBeNull();
    expect(a.applyFailed).toBe(true);
    expect(statusMapOf(log, a, parsePytest)).toEqual({ found: false, statusMap: new Map() });
  });

  it('without both markers nothing is graded', () => {
    const log = `${start}\nPASSED t::a\n`;
    expect(statusMapOf(log, analyzeLog(log), parsePytest).found).toBe(false);
  });

  it('splits like the harness: a second start marker ends the section', () => {
    const log = [start, 'PASSED t::a', start, 'PASSED t::b', end].join('\n');
    expect(Object.fromEntries(statusMapOf(log, analyzeLog(log), parsePytest).statusMap)).toEqual({ 't::a': 'PASSED' });
  });

  it('falls back to the log from the start marker on when the section between the markers holds no result, never to what precedes it', () => {
    const log = ['PASSED t::forged_in_apply_output', start, 'nothing here', end, 'PASSED t::late'].join('\n');
    expect(Object.fromEntries(statusMapOf(log, analyzeLog(log), parsePytest).statusMap)).toEqual({ 't::late': 'PASSED' });
  });

  it('a timeout or error marker anywhere voids grading', () => {
    const log = [start, 'PASSED t::a', end, '>>>>> Tests Timed Out'].join('\n');
    const a = analyzeLog(log);
    expect(a.badCodes).toEqual(['>>>>> Tests Timed Out']);
    expect(statusMapOf(log, a, parsePytest).found).toBe(false);
  });
});
