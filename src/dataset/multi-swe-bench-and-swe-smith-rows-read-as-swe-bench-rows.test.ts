/**
 * Multi-SWE-bench rows and SWE-smith task instances are read as they are published (their own
 * field names), as SWE-bench rows every command takes, and they name their datasets' public
 * per-task images. Rows here have the shape of the published ones (made up contents).
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { type ImageRow, imageForRow } from '../image/dataset-images.js';
import { parseScoreInstance } from '../score/instance.js';
import { loadDataset } from './read.js';
import { rowFormat } from './row-formats.js';
import { loadSpecs, lookupSpec } from './specs.js';

const BASE = 'b'.repeat(40);
const test = (run: string, t: string, fix: string) => ({ run, test: t, fix });

/** A row as Multi-SWE-bench's dataset files hold them. */
const multiSweBench = {
  org: 'gin-gonic',
  repo: 'gin',
  number: 4003,
  state: 'closed',
  title: 'fix: binding of nested maps',
  body: 'Fixes #4002',
  base: { label: 'gin-gonic:master', ref: 'master', sha: BASE },
  resolved_issues: [{ number: 4002, title: 'Nested map binding drops keys', body: 'Binding `a[b][c]=1` loses `c`.' }],
  fix_patch: 'diff --git a/binding/form.go b/binding/form.go\n--- a/binding/form.go\n+++ b/binding/form.go\n@@ -1 +1 @@\n-a\n+b\n',
  test_patch: 'diff --git a/binding/form_test.go b/binding/form_test.go\n--- a/binding/form_test.go\n+++ b/binding/form_test.go\n@@ -1 +1 @@\n-x\n+y\n',
  fixed_tests: { TestNestedMap: test('FAIL', 'FAIL', 'PASS') },
  p2p_tests: { TestBindingForm: test('PASS', 'PASS', 'PASS'), 'TestBindingForm/default': test('PASS', 'PASS', 'PASS') },
  f2p_tests: { TestNestedMap: test('FAIL', 'FAIL', 'PASS') },
  s2p_tests: { TestSkippedBefore: test('SKIP', 'SKIP', 'PASS') },
  n2p_tests: { TestNewInPatch: test('NONE', 'NONE', 'PASS') },
  run_result: { passed_count: 2, failed_count: 1, skipped_count: 1, passed_tests: [], failed_tests: [], skipped_tests: [] },
  test_patch_result: { passed_count: 2, failed_count: 1, skipped_count: 1, passed_tests: [], failed_tests: [], skipped_tests: [] },
  fix_patch_result: { passed_count: 5, failed_count: 0, skipped_count: 0, passed_tests: [], failed_tests: [], skipped_tests: [] },
};

const bugPatch =
  'diff --git a/src/calc.py b/src/calc.py\nindex 1111111..2222222 100644\n--- a/src/calc.py\n+++ b/src/calc.py\n' +
  '@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n';

/** A task instance as SWE-smith's datasets hold them. */
const sweSmith = {
  instance_id: 'acme__calc.1a2b3c4d.func_pm_op_swap__x1y2',
  repo: 'swesmith/acme__calc.1a2b3c4d',
  patch: bugPatch,
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'],
  PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
  created_at: '2025-04-01T00:00:00',
  image_name: 'jyangballin/swesmith.x86_64.acme_1776_calc.1a2b3c4d',
  base_commit: 'c'.repeat(40),
  problem_statement: 'add() subtracts',
};

async function file(name: string, text: string): Promise<string> {
  const f = join(await mkdtemp(join(tmpdir(), 'fmt-')), name);
  await writeFile(f, text);
  return f;
}

describe('rows of other datasets', () => {
  it("Multi-SWE-bench: the fix patch is gold, the fixed tests fail to pass, p2p pass to pass, the PR's number the version", async () => {
    const f = await file('msb.jsonl', `${JSON.stringify(multiSweBench)}\n`);
    const [r] = await loadDataset(f);
    expect(rowFormat(multiSweBench)).toBe('multi-swe-bench');
    expect(r?.row).toMatchObject({
      instance_id: 'gin-gonic__gin-4003',
      repo: 'gin-gonic/gin',
      base_commit: BASE,
      version: '4003',
      patch: multiSweBench.fix_patch,
      test_patch: multiSweBench.test_patch,
      FAIL_TO_PASS: ['TestNestedMap', 'TestSkippedBefore', 'TestNewInPatch'],
      PASS_TO_PASS: ['TestBindingForm', 'TestBindingForm/default'],
      problem_statement: 'Nested map binding drops keys\n\nBinding `a[b][c]=1` loses `c`.',
      // its own fields stay, for whoever reads them
      org: 'gin-gonic',
      number: 4003,
    });
    // and scoring takes it as it takes any row
    expect(parseScoreInstance(r?.row).FAIL_TO_PASS).toHaveLength(3);
  });

  it('Multi-SWE-bench dumps already converted (instance_id, base_commit, lists) keep what they carry', async () => {
    const converted = {
      repo: 'gin-gonic/gin',
      instance_id: 'gin-gonic__gin-4003',
      fix_patch: 'p',
      test_patch: 't',
      FAIL_TO_PASS: ['TestNestedMap'],
      PASS_TO_PASS: [],
      base_commit: BASE,
      version: '1.9',
    };
    const [r] = await loadDataset(await file('conv.jsonl', `${JSON.stringify(converted)}\n`));
    expect(r?.row).toMatchObject({ instance_id: 'gin-gonic__gin-4003', version: '1.9', patch: 'p', FAIL_TO_PASS: ['TestNestedMap'] });
  });

  it('SWE-smith: the gold patch is the bug patch reversed, no test patch, the mirror commit the version', async () => {
    const [r] = await loadDataset(await file('smith.json', JSON.stringify([sweSmith])));
    expect(rowFormat(sweSmith)).toBe('swe-smith');
    expect(r?.row).toMatchObject({ instance_id: sweSmith.instance_id, repo: sweSmith.repo, version: '1a2b3c4d', test_patch: '', bug_patch: bugPatch });
    expect(r?.row.patch).toBe(
      'diff --git a/src/calc.py b/src/calc.py\nindex 2222222..1111111 100644\n--- a/src/calc.py\n+++ b/src/calc.py\n' +
        '@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n',
    );
  });

  it('a malformed row of either is named by its file and line and the field it lacks', async () => {
    const noBase = { ...multiSweBench, base: undefined };
    const f = await file('bad.jsonl', `${JSON.stringify(multiSweBench)}\n${JSON.stringify(noBase)}\n`);
    await expect(loadDataset(f)).rejects.toThrow(`${f}:2: base_commit: `);
    const binary = { ...sweSmith, patch: 'diff --git a/x b/x\nindex 1..2 100644\nGIT binary patch\nliteral 1\nx\n' };
    const g = await file('bad.jsonl', `${JSON.stringify(binary)}\n`);
    await expect(loadDataset(g)).rejects.toThrow(InvalidInputError);
    await expect(loadDataset(g)).rejects.toThrow(`${g}:1: patch: cannot reverse a binary patch`);
  });

  it('a "*" entry in the specs serves every version of its repo that has no entry of its own', async () => {
    const specs = await loadSpecs(
      await file(
        'specs.yaml',
        [
          'repos:',
          '  gin-gonic/gin:',
          '    "*": {image: "mswebench/{org|lower}_m_{name|lower}:pr-{number}", testCmd: go test -v ./..., workdir: /home/gin}',
          '    "4100": {image: "other/{name}:{version}", testCmd: go test -json ./...}',
        ].join('\n'),
      ),
    );
    expect(lookupSpec(specs, 'gin-gonic/gin', '4003', 'row 1').testCmd).toBe('go test -v ./...');
    expect(lookupSpec(specs, 'gin-gonic/gin', '4100', 'row 2').testCmd).toBe('go test -json ./...');
    expect(() => lookupSpec(specs, 'cli/cli', '1', 'row 3')).toThrow('no spec for repo cli/cli');
  });

  it("name their datasets' public per-task images by the datasets' own templates", async () => {
    const [m] = await loadDataset(await file('m.jsonl', JSON.stringify({ ...multiSweBench, org: 'Gin-Gonic' })));
    expect(imageForRow('mswebench/{org|lower}_m_{name|lower}:pr-{number}', m!.row)).toBe('docker://mswebench/gin-gonic_m_gin:pr-4003');
    const [s] = await loadDataset(await file('s.jsonl', JSON.stringify(sweSmith)));
    expect(imageForRow('{image_name}', s!.row)).toBe('docker://jyangballin/swesmith.x86_64.acme_1776_calc.1a2b3c4d');
    expect(imageForRow('swebench/sweb.eval.x86_64.{id}:latest', { instance_id: 'Jqlang__jq-2681', repo: 'jqlang/jq', version: '2681' })).toBe(
      'docker://swebench/sweb.eval.x86_64.jqlang_1776_jq-2681:latest',
    );
    expect(() => imageForRow('x/{nope}', s!.row)).toThrow('names {nope}, which the row has no value for');
  });

  it("specs name a dataset's images by the dataset's name; a name of no known dataset is refused when the specs load", async () => {
    const specs = await loadSpecs(
      await file(
        'specs.yaml',
        [
          'repos:',
          '  Gin-Gonic/gin: {"*": {image: "dataset:multi-swe-bench", testCmd: go test -v ./...}}',
          '  swesmith/acme__calc.1a2b3c4d: {"*": {image: "dataset:swe-smith", testCmd: pytest}}',
          '  jqlang/jq: {"2681": {image: "dataset:swe-bench-multilingual", testCmd: make check}}',
          '  django/django: {"3.0": {image: "dataset:swe-bench", testCmd: ./tests/runtests.py}}',
        ].join('\n'),
      ),
    );
    const [m] = await loadDataset(await file('m.jsonl', JSON.stringify({ ...multiSweBench, org: 'Gin-Gonic' })));
    const [s] = await loadDataset(await file('s.jsonl', JSON.stringify(sweSmith)));
    const image = (row: ImageRow) => imageForRow(lookupSpec(specs, row.repo, row.version, 'row').image ?? '', row);
    expect(image(m!.row)).toBe('docker://mswebench/gin-gonic_m_gin:pr-4003');
    expect(image(s!.row)).toBe('docker://jyangballin/swesmith.x86_64.acme_1776_calc.1a2b3c4d');
    expect(image({ instance_id: 'jqlang__jq-2681', repo: 'jqlang/jq', version: '2681' })).toBe('docker://swebench/sweb.eval.x86_64.jqlang_1776_jq-2681:latest');
    expect(image({ instance_id: 'django__django-11099', repo: 'django/django', version: '3.0' })).toBe(
      'docker://swebench/sweb.eval.x86_64.django_1776_django-11099:latest',
    );
    const bad = await file('bad.yaml', 'repos:\n  a/b: {"1": {image: "dataset:swe-bench-java", testCmd: mvn test}}\n');
    await expect(loadSpecs(bad)).rejects.toThrow(InvalidInputError);
    await expect(loadSpecs(bad)).rejects.toThrow(`${bad}: repos["a/b"]["1"].image: image "dataset:swe-bench-java" names no dataset whose images are known`);
  });
});
