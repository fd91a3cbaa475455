/**
 * JavaScript and TypeScript test logs, read as the SWE-bench harness reads them for its
 * SWE-bench Multilingual repositories: jest `--verbose` (babel, docusaurus), jest `--json` through
 * the harness's jq transform (immutable-js), vitest `--reporter=verbose` (vue), karma with
 * karma-mocha-reporter (preact) and TAP (three.js's QUnit, axios's `mocha -R tap`).
 */
import type { StatusMap, TestStatus } from '../status.js';
import { lines, pyStrip } from './py-text.js';

const JEST = /^\s*(\u{2713}|\u{2715}|\u{25cb})\s(.+?)(?:\s\((\d+\s*m?s)\))?$/su;
const JEST_STATUS: Readonly<Record<string, TestStatus>> = { '✓': 'PASSED', '✕': 'FAILED', '○': 'SKIPPED' };

/**
 * A test is named by its own title only (no describe blocks), so two tests of the same title
 * share one name and the later one's result stands; a skipped test is `skipped <title>` (jest
 * prints it so), and todo tests are not read.
 */
export function parseJest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = JEST.exec(pyStrip(line));
    if (m) map.set(pyStrip(m[2]!), JEST_STATUS[m[1]!]!);
  }
  return map;
}

const JEST_JSON = /^\[(PASSED|FAILED)\]\s(.+)$/s;

/**
 * Lines `[STATUS] describe > ... > title` made by the harness's jq transform of `jest --json`
 * (JEST_JSON_JQ_TRANSFORM); PENDING and TODO are not read.
 */
export function parseJestJson(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = JEST_JSON.exec(pyStrip(line));
    if (m) map.set(m[2]!, m[1] === 'PASSED' ? 'PASSED' : 'FAILED');
  }
  return map;
}

const VITEST = /^\s*(\u{2713}|\u{d7}|\u{2193})\s(.+?)(?:\s(\d+\s*m?s?|\[skipped\]))?$/su;
const VITEST_STATUS: Readonly<Record<string, TestStatus>> = { '✓': 'PASSED', '×': 'FAILED', '↓': 'SKIPPED' };

/** `✓ file > describe > title 12ms`; a trailing number is taken for the duration (even in a skipped test's title). */
export function parseVitest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = VITEST.exec(pyStrip(line));
    if (m) map.set(m[2]!, VITEST_STATUS[m[1]!]!);
  }
  return map;
}

const KARMA = /^(\s*)?([\u{2714}\u{2716}])?\s(.*)$/su;

/**
 * karma-mocha-reporter's tree after `Starting browser`, up to `SUMMARY:`: a test is
 * `suite > ... > title`. The suite path follows indentation one level at a time, as the harness
 * tracks it: a line indented less pops one suite and is not itself pushed, so a later top-level
 * suite's tests are named under the suite before it. A skipped test prints ✖ and reads as failed.
 */
export function parseKarma(log: string): StatusMap {
  const map: StatusMap = new Map();
  let indent = -1;
  const suite: string[] = [];
  let started = false;
  for (const line of lines(log)) {
    if (line.startsWith('SUMMARY:')) return map;
    if (line.includes('Starting browser')) {
      started = true;
      continue;
    }
    if (!started) continue;
    const m = KARMA.exec(line);
    if (!m) continue;
    const [, lead, status, name] = m as unknown as [string, string | undefined, string | undefined, string];
    if (lead && !status) {
      if (lead.length > indent) {
        indent = lead.length;
        suite.push(name);
      } else if (lead.length < indent) {
        indent = lead.length;
        suite.pop();
        continue;
      }
    }
    if (status !== undefined) map.set([...suite, name].join(' > '), status === '✔' ? 'PASSED' : 'FAILED');
  }
  return map;
}

const TAP = /^(ok|not ok) (\d+) (.+)$/s;

/** `ok N title` / `not ok N title`: directives stay in the name (`title # SKIP` passed), subtests are read too. */
export function parseTap(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = TAP.exec(pyStrip(line));
    if (m) map.set(m[3]!, m[1] === 'ok' ? 'PASSED' : 'FAILED');
  }
  return map;
}
