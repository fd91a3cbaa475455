import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { normalizeOptionName, parsePytestLine } from './parsers/pytest.js';
import { defaultParser, getParser, PARSER_NAMES, parserLanguage, parserName, REPO_PARSERS, REPO_VERSION_PARSERS } from './parsers/registry.js';

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
const parse = (parser: string, file: string) => Object.fromEntries(getParser(parser)(fixture(file)));

describe('pytest -rA parser (harness semantics)', () => {
  it('reads status-first summary lines, cutting FAILED messages at " - " and skipping grouped skips', () => {
    expect(parse('pytest', 'pytest-rA.log')).toEqual({
      // The harness's reading also takes a pytest section banner for a test; kept for agreement.
      ______________________: 'ERROR',
      'tests/test_core.py::test_add': 'PASSED',
      'tests/test_core.py::test_param[1-2]': 'PASSED',
      // An id with a space is cut at the space, exactly as in the datasets' test lists.
      'tests/test_core.py::test_param[a': 'PASSED',
      'tests/test_core.py::TestKlass::test_method': 'PASSED',
      'tests/test_core.py::test_sub': 'FAILED',
      'tests/test_core.py::test_dash': 'FAILED',
      'tests/test_core.py::test_with_fixture': 'ERROR',
      'tests/test_core.py::test_skipped_by_name': 'SKIPPED',
      'tests/test_core.py::test_known': 'XFAIL',
    });
  });

  it('reads test-first verbose lines, with trailing reasons and percentages', () => {
    expect(parse('pytest', 'pytest-verbose.log')).toEqual({
      'tests/test_io.py::test_read': 'PASSED',
      'tests/test_io.py::test_write': 'FAILED',
      'tests/test_io.py::test_param[x-1]': 'PASSED',
      'tests/test_io.py::test_param[y-2]': 'SKIPPED',
      'tests/test_io.py::test_legacy': 'XFAIL',
      'tests/test_io.py::TestStream::test_close': 'ERROR',
    });
  });

  it('pytest_v2 strips colour codes before reading', () => {
    expect(parse('pytest_v2', 'pytest-ansi.log')).toEqual({
      'astropy/io/tests/test_a.py::test_ok': 'PASSED',
      'astropy/io/tests/test_a.py::test_bad': 'FAILED',
      'astropy/io/tests/test_a.py::test_verbose': 'PASSED',
    });
    expect(getParser('pytest')(fixture('pytest-ansi.log')).size).toBe(0);
  });

  it('a FAILED line whose message holds " - " keeps only the test id', () => {
    expect(parsePytestLine('FAILED tests/a.py::t[x] - assert a - b == c - d')).toEqual(['tests/a.py::t[x]', 'FAILED']);
    expect(parsePytestLine('tests/a.py::t PASSED')).toEqual(['tests/a.py::t', 'PASSED']);
    expect(parsePytestLine('tests/a.py::t PASSEDX')).toBeNull();
    expect(parsePytestLine('SKIPPED [2] tests/a.py:3: slow')).toBeNull();
  });

  it('pytest_options shortens absolute path parameters to their last component', () => {
    expect(normalizeOptionName('t.py::test_x[/tmp/abc/def.txt]')).toBe('t.py::test_x[/def.txt]');
    expect(normalizeOptionName('t.py::test_x[//host/share]')).toBe('t.py::test_x[//host/share]');
    expect(normalizeOptionName('t.py::test_x[a-b]')).toBe('t.py::test_x[a-b]');
  });
});

describe('Django runner parser (harness semantics)', () => {
  it('reads results inline, after test output, across system-check noise, and docstring-named tests', () => {
    expect(parse('django', 'django.log')).toEqual({
      'test_basic (queries.tests.Queries1Tests)': 'PASSED',
      'test_filter (queries.tests.Queries1Tests)': 'FAILED',
      'test_error (queries.tests.Queries1Tests)': 'ERROR',
      'test_skip (queries.tests.Queries1Tests)': 'SKIPPED',
      // A test with a docstring is named by the docstring's first line, as in the datasets.
      'Regression test for #12345 - values() with a - in it.': 'PASSED',
      'test_printing (queries.tests.Queries1Tests)': 'PASSED',
      'test_check_silenced (check_framework.tests.CheckCommandTests)': 'PASSED',
      'test_upper (queries.tests.Queries1Tests)': 'PASSED',
      'test_interrupted (queries.tests.Queries2Tests)': 'PASSED',
      // The FAIL:/ERROR: banners record the bare method name too.
      test_error: 'ERROR',
      test_filter: 'FAILED',
    });
  });

  it('recognises a result pushed to the next line by a multi-line interruption', () => {
    const log = 'test_a (m.T) ... Internal Server Error: /admin/x/\nok\ntest_b (m.T) ... System check identified no issues (0 silenced)\nok\n';
    expect(Object.fromEntries(getParser('django')(log))).toEqual({ 'test_a (m.T)': 'PASSED', 'test_b (m.T)': 'PASSED' });
  });
});

describe('SymPy bin/test parser (harness semantics)', () => {
  it('reads per-test verbose lines and the failure banners', () => {
    expect(parse('sympy', 'sympy.log')).toEqual({
      'sympy/core/tests/test_basic.py:test_equality': 'FAILED',
      'sympy/core/tests/test_expr.py:test_issue_1234': 'FAILED',
      test__aresame: 'PASSED',
      test_structure: 'PASSED',
      test_issue_1234: 'ERROR',
    });
  });
});

describe('plain unittest -v parser', () => {
  it('reads a real Python 3.11 log: docstrings, output before the result, subtests, skips, expected failures', () => {
    expect(parse('unittest', 'unittest-py311.log')).toEqual({
      'test_add (pkg.test_m.T.test_add)': 'PASSED',
      'test_doc (pkg.test_m.T.test_doc)': 'FAILED',
      'test_err (pkg.test_m.T.test_err)': 'ERROR',
      'test_noisy (pkg.test_m.T.test_noisy)': 'PASSED',
      'test_skip (pkg.test_m.T.test_skip)': 'SKIPPED',
      'test_sub (pkg.test_m.T.test_sub) (i=1)': 'FAILED',
      'test_sub (pkg.test_m.T.test_sub)': 'FAILED',
      'test_xf (pkg.test_m.T.test_xf)': 'XFAIL',
      'test_xp (pkg.test_m.T.test_xp)': 'FAILED',
    });
  });

  it('reads the pre-3.11 name form', () => {
    const log = 'test_a (pkg.mod.T) ... ok\ntest_b (pkg.mod.T) ... FAIL\n';
    expect(Object.fromEntries(getParser('unittest')(log))).toEqual({ 'test_a (pkg.mod.T)': 'PASSED', 'test_b (pkg.mod.T)': 'FAILED' });
  });
});

describe('parser registry', () => {
  it('maps every harness repository, multilingual ones per version where the harness picks per instance', () => {
    for (const byVersion of Object.values(REPO_VERSION_PARSERS)) for (const name of Object.values(byVersion)) expect(PARSER_NAMES).toContain(name);
    expect(defaultParser('jqlang/jq', '2839')).toBe('jq');
    expect(defaultParser('tokio-rs/axum', 'any')).toBe('cargo');
    expect(defaultParser('immutable-js/immutable-js', '2005')).toBe('jest_json');
    expect(defaultParser('jekyll/jekyll', '8761')).toBe('cucumber');
    expect(defaultParser('jekyll/jekyll', '1')).toBeNull();
    expect(defaultParser('someone/else', '1.0')).toBeNull();
    expect(defaultParser('constructor', '1.0')).toBeNull();
  });

  it("accepts the harness's parse_log_<name> spelling of a name, and nothing else", () => {
    expect(parserName('parse_log_gotest')).toBe('gotest');
    expect(parserName('gotest')).toBe('gotest');
    expect(parserName('parse_log_nose')).toBeNull();
    expect(parserName('parse_log_')).toBeNull();
    expect(getParser('parse_log_redis')).toBe(getParser('redis'));
  });

  it('knows which parsers read Python runners', () => {
    expect(parserLanguage('django')).toBe('python');
    expect(parserLanguage('unittest')).toBe('python');
    expect(parserLanguage('jq')).toBe('c');
    expect(parserLanguage('junit_xml')).toBe('any');
    expect(() => parserLanguage('nose')).toThrow(/unknown log parser/);
  });

  it('names every parser, maps every SWE-bench repository to a known one, and rejects unknown names with the list', () => {
    for (const name of Object.values(REPO_PARSERS)) expect(PARSER_NAMES).toContain(name);
    expect(() => getParser('nose')).toThrow(/unknown log parser "nose"[\s\S]*/);
    try {
      getParser('nose');
    } catch (e) {
      expect((e as { hint?: string }).hint).toContain('pytest');
    }
  });
});
