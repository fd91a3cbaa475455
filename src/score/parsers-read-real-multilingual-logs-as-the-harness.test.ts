/**
 * The multilingual parsers on real logs (src/score/fixtures/*.log, each saying on its first line
 * which tool and version made it). Every expected map here was checked against the SWE-bench
 * harness's own Python parser run on the same fixture: quirks included, they are its readings.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { getParser } from './parsers/registry.js';

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
const parse = (parser: string, file: string) => Object.fromEntries(getParser(parser)(fixture(file)));

describe('C and C++', () => {
  it('redis: [ok]/[err]/[skip] lines without durations or the failing file; the closing summary is not read', () => {
    expect(parse('redis', 'redis-runtest.log')).toEqual({
      'SET and GET round-trip': 'PASSED',
      'GETRANGE against a wrong value (on purpose)': 'FAILED',
      'Skipped by --skiptest': 'SKIPPED',
      'Value with [brackets] & symbols: works': 'PASSED',
    });
  });

  it('micropython_test: run-tests.py result lines, trailing space stripped; the summary is not read', () => {
    const r = parse('micropython_test', 'micropython-run-tests.log');
    expect(Object.keys(r)).toHaveLength(20);
    expect(r).toMatchObject({
      'basics/builtin_help.py': 'FAILED',
      'basics/string_tstring_format1.py': 'SKIPPED',
      'basics/fun_calldblstar.py': 'PASSED',
      'float/string_format_modulo3.py': 'PASSED',
    });
    expect(Object.values(r).filter((s) => s === 'PASSED')).toHaveLength(18);
  });

  it('jq: automake reads PASS and FAIL only; SKIP, ERROR and XFAIL are missing', () => {
    expect(parse('jq', 'automake-check.log')).toEqual({ 'tests/add.test': 'PASSED', 'tests/sub.test': 'FAILED', 'tests/odd-name+v2.test': 'PASSED' });
  });

  it('doctest: one result per subcase, a subcase without assertions passes, a case without subcases is missing', () => {
    expect(parse('doctest', 'doctest-xml.log')).toEqual({
      'addition works > small numbers': 'PASSED',
      'addition works > negative & <odd> "names"': 'PASSED',
      'addition works > wrong on purpose': 'FAILED',
      // threw before any assertion: no failed Expression under it
      'unexpected exception > inner': 'PASSED',
      'nested > inner one': 'PASSED',
      'nested > inner two': 'FAILED',
      // "outer" is entered twice; the second pass (holding inner two) stands
      'nested > outer': 'FAILED',
    });
  });

  it('googletest through ctest -V: OK and FAILED with a duration; skipped and disabled are missing', () => {
    expect(parse('googletest', 'ctest-gtest-v.log')).toEqual({
      'FormatTest.Basic': 'PASSED',
      'FormatTest.Broken': 'FAILED',
      'FormatTest.Throws': 'FAILED',
      'Small/ParamTest.IsSmall/0': 'PASSED',
      'Small/ParamTest.IsSmall/1, where GetParam() = 5': 'FAILED',
    });
  });

  it('catch2: one result per test case from its OverallResult; shouldfail is XFAIL, hidden tests are missing', () => {
    expect(parse('catch2', 'catch2-xml.log')).toEqual({
      'adds small numbers': 'PASSED',
      'adds & compares <odd> "names"': 'FAILED',
      'throws unexpectedly': 'FAILED',
      sections: 'FAILED',
      'expected to fail': 'XFAIL',
      'may fail': 'PASSED',
    });
  });

  it("ctest: CTest's result lines, skips and disabled tests as SKIPPED, everything else that did not pass as FAILED", () => {
    expect(parse('ctest', 'ctest.log')).toEqual({
      'format-test': 'FAILED',
      'plain.ok+1': 'PASSED',
      'turned-off': 'SKIPPED',
      crasher: 'FAILED',
      'plain-fail': 'FAILED',
      skipper: 'SKIPPED',
      'missing-binary': 'FAILED',
      slowpoke: 'FAILED',
    });
    expect(parse('ctest', 'ctest-gtest-v.log')).toEqual({ 'format-test': 'FAILED' });
  });
});

describe('Go', () => {
  const v = {
    TestAdd: 'PASSED',
    TestSub: 'FAILED',
    TestSkipped: 'SKIPPED',
    TestTable: 'FAILED',
    'TestTable/one_plus_one': 'PASSED',
    'TestTable/with/slash_&_more': 'FAILED',
    'TestTable/negative': 'PASSED',
    // printed by TestNoisy, shaped exactly like a result line: both readers take it
    TestPrintedOnly: 'PASSED',
    TestNoisy: 'PASSED',
    TestPanics: 'FAILED',
  };

  it('gotest: -v result lines, subtests and indented ones included', () => {
    expect(parse('gotest', 'go-test-v.log')).toEqual(v);
  });

  it('gotest_json: the same names and statuses from test2json events of the same run', () => {
    expect(parse('gotest_json', 'go-test-json.log')).toEqual(v);
    expect(parse('gotest', 'go-test-json.log')).toEqual({});
  });
});

describe('Rust', () => {
  it('cargo: ok and FAILED only; ignored, should_panic and doc tests are missing; captured output is read', () => {
    expect(parse('cargo', 'cargo-test.log')).toEqual({
      'tests::adds': 'PASSED',
      'tests::nested::deep_test': 'PASSED',
      'tests::fails': 'FAILED',
      from_outside: 'PASSED',
      prints_then_fails: 'FAILED',
      // `println!("test fake_from_stdout ... ok")` in a failing test's captured stdout
      fake_from_stdout: 'PASSED',
    });
  });
});

describe('Java', () => {
  it('maven: -Dtest= of each traced command, then its BUILD line; a skipped test builds fine and passes', () => {
    expect(parse('maven', 'maven-per-test.log')).toEqual({
      'com.example.CalcTest#testAdd': 'PASSED',
      'com.example.CalcTest#testBroken': 'FAILED',
      'com.example.CalcTest#testThrows': 'FAILED',
      'com.example.CalcTest#testIgnored': 'PASSED',
    });
  });

  it('maven: results printed before their trace lines pair up first in, first out', () => {
    const log = '[INFO] BUILD FAILURE\n+ mvn test -Dtest=A#a\n+ mvn test -Dtest=B#b\n[INFO] BUILD SUCCESS\n';
    expect(Object.fromEntries(getParser('maven')(log))).toEqual({ 'A#a': 'PASSED', 'B#b': 'FAILED' });
  });

  it("ant: the last line per test wins, and ant's endTest after a failure prints [PASS]", () => {
    expect(parse('ant', 'ant-junit.log')).toEqual({
      'testAdd(com.example.CalcTest)': 'PASSED',
      'testBroken(com.example.CalcTest)': 'PASSED',
      'testThrows(com.example.CalcTest)': 'PASSED',
    });
  });

  it('gradle_custom: `Class > method PASSED|FAILED`, SKIPPED not read, `:test FAILED` taken for a test', () => {
    expect(parse('gradle_custom', 'gradle-test.log')).toEqual({
      'com.example.CalcTest > testAdd': 'PASSED',
      'com.example.CalcTest > testBroken': 'FAILED',
      'com.example.CalcTest > testThrows': 'FAILED',
      ':test': 'FAILED',
    });
    const interleaved = 'com.example.T > testX\nwarning: something\nPASSED\n';
    expect(Object.fromEntries(getParser('gradle_custom')(interleaved))).toEqual({ 'com.example.T > testX': 'PASSED' });
  });

  it('junit_xml: Surefire, Gradle, PHPUnit, Catch2 and CTest reports in one log, CDATA and entities included', () => {
    const r = parse('junit_xml', 'junit-reports.log');
    expect(r).toMatchObject({
      'com.example.CalcTest.testAdd': 'PASSED',
      'com.example.CalcTest.testBroken': 'FAILED',
      'com.example.CalcTest.testIgnored': 'SKIPPED',
      'CalcTest.testPairs with data set "wrong "quoted""': 'FAILED',
      // PHPUnit 11 reports a risky test as passed, an incomplete one as skipped, and dots the namespace
      'CalcTest.testRiskyOne': 'PASSED',
      'CalcTest.testIncompleteOne': 'SKIPPED',
      'Acme.Tests.Support.SupportStrTest.testTrims with data set "tabs > newlines"': 'FAILED',
      't.global.adds & compares <odd> "names"': 'FAILED',
      't.global.throws unexpectedly': 'ERROR',
      't.global.sections/first': 'PASSED',
      't.global.may fail': 'SKIPPED',
      'format-test.format-test': 'FAILED',
      'plain.ok+1.plain.ok+1': 'PASSED',
      'skipper.skipper': 'SKIPPED',
      // CTest: status="disabled" with no child; a missing executable is <skipped/>
      'turned-off.turned-off': 'SKIPPED',
      'missing-binary.missing-binary': 'SKIPPED',
    });
    // Surefire reports the exception as an error; Gradle's report, later in the log, as a failure
    expect(r['com.example.CalcTest.testThrows']).toBe('FAILED');
    expect(Object.keys(r)).toHaveLength(32);
  });
});

describe('JavaScript and TypeScript', () => {
  it('jest: titles without their describe blocks, so a repeated title keeps its last result', () => {
    expect(parse('jest', 'jest-verbose.log')).toEqual({
      'top level ✓ with a check mark': 'PASSED',
      // Range's passes, nested's fails
      'adds small numbers': 'FAILED',
      'breaks on purpose': 'FAILED',
      throws: 'FAILED',
      'slow one': 'PASSED',
      'skipped is skipped': 'SKIPPED',
      'works inside': 'PASSED',
    });
  });

  it('jest_json: full paths from the jq transform; pending and todo are missing', () => {
    expect(parse('jest_json', 'jest-json.log')).toEqual({
      'Range > adds small numbers': 'PASSED',
      'Range > breaks on purpose': 'FAILED',
      'Range > nested (with parens) & symbols > works inside': 'PASSED',
      'Range > nested (with parens) & symbols > adds small numbers': 'FAILED',
      'Range > throws': 'FAILED',
      'Range > slow one': 'PASSED',
      'top level ✓ with a check mark': 'PASSED',
    });
  });

  it('vitest: the verbose path without its duration; todo is missing', () => {
    expect(parse('vitest', 'vitest-verbose.log')).toEqual({
      'calc.spec.js > mismatch handling > adds small numbers': 'PASSED',
      'calc.spec.js > mismatch handling > breaks on purpose': 'FAILED',
      'calc.spec.js > mismatch handling > is skipped': 'SKIPPED',
      'calc.spec.js > mismatch handling > nested (with parens) & symbols > works inside': 'PASSED',
      'calc.spec.js > mismatch handling > throws': 'FAILED',
      'calc.spec.js > mismatch handling > slow one': 'PASSED',
    });
  });

  it("karma: the mocha reporter's tree; a dedent pops one suite, so hooks' test lands under render()", () => {
    expect(parse('karma', 'karma-mocha-reporter.log')).toEqual({
      // overwritten by hooks' test of the same title
      'render() > should render a string': 'PASSED',
      'render() > should fail on purpose': 'FAILED',
      'render() > should be skipped (skipped)': 'FAILED',
      'render() > svg (with parens) & "quotes" > should render svg': 'PASSED',
      'render() > svg (with parens) & "quotes" > should render a string': 'PASSED',
    });
  });

  it('tap: mocha -R tap and QUnit; directives stay in the name, so a skip passes and a todo fails', () => {
    expect(parse('tap', 'mocha-tap.log')).toEqual({
      'supports http with nodejs should support compression': 'PASSED',
      'supports http with nodejs should fail on purpose': 'FAILED',
      'supports http with nodejs should be skipped # SKIP -': 'PASSED',
      'supports http with nodejs is pending without a body # SKIP -': 'PASSED',
      // console.log('ok 99 fake from stdout') inside a test
      'fake from stdout': 'PASSED',
      'supports http with nodejs prints a fake TAP line': 'PASSED',
      'supports http with nodejs FormData (with parens) & "quotes" should allow passing FormData': 'PASSED',
      'supports http with nodejs FormData (with parens) & "quotes" should support compression': 'FAILED',
    });
    expect(parse('tap', 'qunit-tap.log')).toEqual({
      'Maths > Sphere > Instancing': 'PASSED',
      'Maths > Sphere > clone / copy & equals': 'FAILED',
      'Maths > Sphere > setFromPoints # SKIP': 'PASSED',
      'Maths > Sphere > union # TODO': 'FAILED',
      'Maths > Sphere > throws': 'FAILED',
    });
  });
});

describe('PHP', () => {
  it('phpunit: `Suite > title` under a `Suite (Namespace\\Class)` header, "None" before the first one', () => {
    expect(parse('phpunit', 'phpunit-testdox.log')).toEqual({
      'None > It does the thing (with parens)': 'PASSED',
      'None > Adds numbers': 'PASSED',
      'None > Broken sum': 'FAILED',
      'None > Throws error': 'FAILED',
      'None > Skipped one': 'SKIPPED',
      'None > Pairs with data set "one & one"': 'PASSED',
      'None > Pairs with data set "wrong "quoted""': 'FAILED',
      'None > Pairs with data set #0': 'PASSED',
      'Support Str > Slugifies text': 'PASSED',
      'Support Str > Trims with data set "spaces (both ends)"': 'PASSED',
      'Support Str > Trims with data set "tabs > newlines"': 'FAILED',
    });
  });
});

describe('Ruby', () => {
  it('minitest: names ending in ". " only; a skip reads as passed, an error as failed', () => {
    expect(parse('minitest', 'minitest-v.log')).toEqual({
      'TestSite#test_: creating sites should have an empty tag hash': 'PASSED',
      'TestSite#test_: creating sites should read static files': 'FAILED',
      'TestSite#test_: creating sites should skip drafts': 'PASSED',
      'TestSite#test_: creating sites should survive an error': 'FAILED',
    });
  });

  it('ruby_unit: test-unit -v lines; omission is SKIPPED, pending is missing, contexts are not in names', () => {
    expect(parse('ruby_unit', 'test-unit-v.log')).toEqual({
      'rotate age with spaces: and colon': 'PASSED',
      test_broken: 'FAILED',
      test_omitted: 'SKIPPED',
      test_raises: 'FAILED',
      test_reads: 'PASSED',
      'data driven[one]': 'PASSED',
      'data driven[two & more]': 'FAILED',
      'inner works': 'PASSED',
    });
  });

  it("cucumber: cucumber's own progress output yields nothing; only `<name> ...F`-shaped lines are read", () => {
    expect(parse('cucumber', 'cucumber-progress.log')).toEqual({});
    // the shape the harness's pattern reads (jekyll's logs), not a format this cucumber writes
    const shaped = 'Scenario: Use post.title variable ...\nScenario: Broken .F\n';
    expect(Object.fromEntries(getParser('cucumber')(shaped))).toEqual({ 'Scenario: Use post.title variable': 'PASSED', 'Scenario: Broken': 'FAILED' });
  });

  it("rspec_transformed_json: the harness's three jq transforms; pending is missing; a traced ` - failed` is read too", () => {
    expect(parse('rspec_transformed_json', 'rspec-transformed.log')).toEqual({
      // fpm's and rubocop's transforms
      'adds numbers': 'PASSED',
      'breaks on purpose': 'FAILED',
      'repeats the same description': 'PASSED',
      'handles "quotes" & symbols': 'PASSED',
      // fastlane's, with the example id
      'adds numbers - ./spec/calc_spec.rb[1:1]': 'PASSED',
      'breaks on purpose - ./spec/calc_spec.rb[1:2]': 'FAILED',
      'repeats the same description - ./spec/calc_spec.rb[1:6]': 'PASSED',
      'repeats the same description - ./spec/calc_spec.rb[1:7]': 'PASSED',
      'repeats the same description - ./spec/calc_spec.rb[1:8]': 'PASSED',
      'handles "quotes" & symbols - ./spec/calc_spec.rb[1:5:1]': 'PASSED',
      // rubocop's jq program as `set -x` traced it
      '(.[0] | "\\(.description)': 'FAILED',
    });
  });
});
