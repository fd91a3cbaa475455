import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { diffFiles, gitDirWrite, modifiedFiles, testDirectives } from './diff-files.js';
import { parseScoreInstance } from './instance.js';
import { parsePredictions } from './predictions.js';

const row = {
  instance_id: 'o__r-1',
  repo: 'o/r',
  base_commit: 'a'.repeat(40),
  version: 3.0,
  test_patch: '',
  FAIL_TO_PASS: '["t1", "t2"]',
  PASS_TO_PASS: ['p1'],
};

describe('dataset rows', () => {
  it('accepts FAIL_TO_PASS / PASS_TO_PASS as JSON strings or lists, and numeric versions', () => {
    const r = parseScoreInstance(row);
    expect(r.FAIL_TO_PASS).toEqual(['t1', 't2']);
    expect(r.PASS_TO_PASS).toEqual(['p1']);
    expect(r.version).toBe('3');
    expect(parseScoreInstance({ ...row, FAIL_TO_PASS: '[]', extra: 1 }).FAIL_TO_PASS).toEqual([]);
  });

  it('rejects a JSON string that is not a list of names, saying what the row needs', () => {
    expect(() => parseScoreInstance({ ...row, FAIL_TO_PASS: 'not json' })).toThrow(InvalidInputError);
    expect(() => parseScoreInstance({ ...row, PASS_TO_PASS: '{"a": 1}' })).toThrow(/PASS_TO_PASS/);
  });
});

describe('prediction files', () => {
  const p = (id: string, patch: string | null) => ({ instance_id: id, model_patch: patch, model_name_or_path: 'm' });

  it('reads JSONL, a JSON list, a JSON object keyed by id and a single-object JSONL', () => {
    const jsonl = `${[p('a', 'x'), p('b', null)].map((o) => JSON.stringify(o)).join('\n')}\n`;
    expect(parsePredictions(jsonl).map((x) => x.instance_id)).toEqual(['a', 'b']);
    expect(parsePredictions(JSON.stringify([p('a', 'x')]))).toHaveLength(1);
    expect(parsePredictions(JSON.stringify({ a: p('a', 'x'), b: p('b', '') })).map((x) => x.model_patch)).toEqual(['x', '']);
    expect(parsePredictions(JSON.stringify(p('a', null)))[0]!.model_patch).toBeNull();
    expect(parsePredictions('')).toEqual([]);
  });

  it('rejects a prediction without instance_id, naming the line and the field', () => {
    expect(() => parsePredictions('{"instance_id":"a","model_patch":""}\n{"model_patch":"x"}\n')).toThrow(/^predictions:2: instance_id is missing$/);
    expect(() => parsePredictions('{"instance_id":"a","model_patch":""}\nnot json\n')).toThrow(/predictions:2/);
    // one row alone on one line is read as a JSON document: it still names the line and the field
    expect(() => parsePredictions('{"model_patch":"diff","model_name_or_path":"m"}\n', 'p.jsonl')).toThrow(/^p\.jsonl:1: instance_id is missing$/);
    expect(() => parsePredictions('{"instance_id":7,"model_patch":"x"}')).toThrow(/^predictions:1: instance_id: expected string, received number$/);
    expect(() => parsePredictions(JSON.stringify([p('a', 'x'), { model_patch: 'y' }], null, 1))).toThrow(/^predictions\[1\]: instance_id is missing$/);
  });
});

describe('files of a diff', () => {
  const patch = [
    'diff --git a/tests/test_a.py b/tests/test_a.py',
    '--- a/tests/test_a.py',
    '+++ b/tests/test_a.py',
    '@@ -1,2 +1,2 @@',
    ' x',
    '--- this removed line looks like a header',
    '+++ and this added one too',
    'diff --git a/tests/new_test.py b/tests/new_test.py',
    'new file mode 100644',
    '--- /dev/null',
    '+++ b/tests/new_test.py',
    '@@ -0,0 +1 @@',
    '+y',
    'diff --git a/tests/data/fixture.json b/tests/data/fixture.json',
    '--- a/tests/data/fixture.json',
    '+++ b/tests/data/fixture.json',
    '@@ -1 +1 @@',
    '-{}',
    '+[]',
    '',
  ].join('\n');

  it('lists files from their headers, never from hunk bodies', () => {
    expect(diffFiles(patch)).toEqual([
      { oldPath: 'tests/test_a.py', newPath: 'tests/test_a.py' },
      { oldPath: null, newPath: 'tests/new_test.py' },
      { oldPath: 'tests/data/fixture.json', newPath: 'tests/data/fixture.json' },
    ]);
  });

  it('resets only files that exist at the base commit', () => {
    expect(modifiedFiles(patch)).toEqual(['tests/test_a.py', 'tests/data/fixture.json']);
  });

  it('appends non-data files as directives, as Django modules when asked', () => {
    expect(testDirectives(patch, 'files')).toEqual(['tests/test_a.py', 'tests/new_test.py']);
    expect(testDirectives(patch, 'django')).toEqual(['test_a', 'new_test']);
    expect(testDirectives(patch, 'none')).toEqual([]);
  });

  it('unquotes git C-quoted paths', () => {
    expect(diffFiles('--- "a/sp\\303\\244ce \\"q\\".py"\n+++ "b/sp\\303\\244ce \\"q\\".py"\n')).toEqual([{ oldPath: 'späce "q".py', newPath: 'späce "q".py' }]);
  });
});

describe('patches that write inside .git', () => {
  it('are found in any header dialect, and ordinary paths named like .git are not', () => {
    expect(gitDirWrite('--- /dev/null\n+++ b/.git/config\n')).toBe('+++ b/.git/config');
    expect(gitDirWrite('Index: .git/hooks/pre-commit\n')).not.toBeNull();
    expect(gitDirWrite('*** a/sub/.GIT/config\n')).not.toBeNull();
    expect(gitDirWrite('rename to .git\n')).not.toBeNull();
    expect(gitDirWrite('--- a/.gitignore\n+++ b/.gitignore\n@@ -1 +1 @@\n-x\n+y\n')).toBeNull();
    expect(gitDirWrite('--- a/docs/using.git.md\n+++ b/docs/using.git.md\n')).toBeNull();
  });
});
