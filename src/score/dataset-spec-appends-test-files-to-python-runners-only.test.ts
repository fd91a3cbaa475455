import { describe, expect, it } from 'vitest';
import { evalSpecFromDataset } from './dataset-spec.js';
import { makeEvalScript, testCommand } from './eval-script.js';
import { EvalSpecSchema } from './spec.js';

const testPatch = 'diff --git a/tests/jq.test b/tests/jq.test\n--- a/tests/jq.test\n+++ b/tests/jq.test\n@@ -1 +1 @@\n-a\n+b\n';
const dataset = (repo: string, logParser: string, testCmd: string, build: string[] = []) =>
  EvalSpecSchema.parse(evalSpecFromDataset({ repo, logParser, testCmd, build, workdir: '/testbed', evalEnv: {} }));

describe('the eval spec of a dataset entry', () => {
  it('appends nothing to a multilingual command, as the harness (`make check` stays `make check`)', () => {
    expect(testCommand(dataset('jqlang/jq', 'jq', 'make check'), testPatch)).toBe('make check');
    expect(testCommand(dataset('google/gson', 'maven', 'mvnd test -Dtest=A#a\nmvnd test -Dtest=A#b'), testPatch)).toBe(
      'mvnd test -Dtest=A#a\nmvnd test -Dtest=A#b',
    );
  });

  it('appends the test files to a Python runner, and dotted modules to Django', () => {
    expect(testCommand(dataset('pydata/xarray', 'pytest', 'pytest -rA'), testPatch)).toBe('pytest -rA tests/jq.test');
    expect(testCommand(dataset('django/django', 'django', './tests/runtests.py'), testPatch)).toBe('./tests/runtests.py jq.test');
  });

  it('runs the build after the test patch and before the tests, outside the markers, with git config back', () => {
    const spec = dataset('jqlang/jq', 'jq', 'make check', ['git submodule update --init', 'make -j2']);
    const lines = makeEvalScript({
      instance: { base_commit: 'a'.repeat(40), test_patch: testPatch },
      spec,
      patchPath: null,
      testPatchPath: '/t/test.patch',
    }).split('\n');
    const at = (line: string) => lines.indexOf(line);
    const order = [
      at('git apply -v /t/test.patch'),
      lines.findIndex((l) => l.startsWith('unset GIT_CONFIG_COUNT')),
      at('git submodule update --init'),
      at('make -j2'),
      at(": '>>>>> Start Test Output'"),
      at('make check'),
      at(": '>>>>> End Test Output'"),
    ];
    expect(order.every((i) => i >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
  });
});
