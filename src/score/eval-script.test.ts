import { describe, expect, it } from 'vitest';
import { makeEvalScript, testCommand } from './eval-script.js';
import { EvalSpecSchema } from './spec.js';

const testPatch = [
  'diff --git a/tests/queries/test_q.py b/tests/queries/test_q.py',
  '--- a/tests/queries/test_q.py',
  '+++ b/tests/queries/test_q.py',
  '@@ -1 +1 @@',
  '-a',
  '+b',
  'diff --git a/tests/queries/new test.py b/tests/queries/new test.py',
  'new file mode 100644',
  '--- /dev/null',
  '+++ b/tests/queries/new test.py',
  '@@ -0,0 +1 @@',
  '+c',
  '',
].join('\n');
const instance = { base_commit: 'a'.repeat(40), test_patch: testPatch };

describe('eval script', () => {
  it('applies, resets, applies the test patch and runs the tests between the markers, in the harness order', () => {
    const spec = EvalSpecSchema.parse({ testCmd: 'pytest -rA', parser: 'pytest', preCommands: ['export A=1'] });
    const lines = makeEvalScript({ instance, spec, patchPath: '/tmp/e/patch.diff', testPatchPath: '/tmp/e/test.patch' }).split('\n');
    const at = (re: RegExp) => lines.findIndex((l) => re.test(l));
    expect(lines.slice(0, 2)).toEqual(['#!/bin/bash', 'set -uxo pipefail']);
    expect(lines).not.toContain('set -e');
    const order = [
      /^cd \/testbed$/,
      /^export A=1$/,
      /^if git apply --verbose \/tmp\/e\/patch.diff /,
      /^elif git apply --verbose --reject /,
      /^elif patch --batch --fuzz=5 -p1 -i /,
      /^ {2}exit 1$/,
      /^git checkout a{40} -- tests\/queries\/test_q.py$/,
      /^git apply -v \/tmp\/e\/test.patch$/,
      /^unset GIT_CONFIG_COUNT/,
      /^: '>>>>> Start Test Output'$/,
      /^pytest -rA tests\/queries\/test_q.py 'tests\/queries\/new test.py'$/,
      /^: '>>>>> End Test Output'$/,
    ];
    const positions = order.map(at);
    expect(positions.every((p) => p >= 0)).toBe(true);
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
    // The git guards are on before the apply chain and back on after the tests, for the final reset.
    expect(at(/^export GIT_CONFIG_COUNT/)).toBeLessThan(at(/^cd /));
    expect(lines.length - 1 - [...lines].reverse().findIndex((l) => l.startsWith('export GIT_CONFIG_COUNT'))).toBeGreaterThan(at(/End Test Output/));
    // The reset is repeated after the tests; a file the test patch creates is never checked out.
    expect(lines.filter((l) => l.startsWith('git checkout')).length).toBe(2);
    expect(lines.join('\n')).not.toMatch(/checkout.*new test/);
  });

  it('without a patch, applies nothing and still runs the tests', () => {
    const spec = EvalSpecSchema.parse({ testCmd: './tests/runtests.py --verbosity 2', parser: 'django', directives: 'django' });
    const script = makeEvalScript({ instance, spec, patchPath: null, testPatchPath: '/t' });
    expect(script).not.toContain('git apply --verbose');
    expect(testCommand(spec, testPatch)).toBe("./tests/runtests.py --verbosity 2 queries.test_q 'queries.new test'");
  });
});
