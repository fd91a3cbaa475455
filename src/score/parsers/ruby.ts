/**
 * Ruby test logs, read as the SWE-bench harness reads them for its Ruby repositories: minitest
 * `-v` (jekyll), cucumber's progress lines (jekyll), test-unit `-v` (fluentd, faker) and RSpec's
 * `--format json` through the harness's jq transforms (fastlane, fpm, rubocop).
 */
import type { StatusMap } from '../status.js';
import { lines, PY_WORD, pyStrip } from './py-text.js';

const MINITEST = /^(.+)\. .*=.*(\.|F|E).*$/s;

/**
 * `Class#test_name. = 0.00 s = .`: the pattern wants a name ending in `. ` (shoulda-context names,
 * as jekyll's are), so a plain `Class#test_x = 0.00 s = .` line is not read; the outcome is the
 * last `.`, `F` or `E` on the line, so a skip (`= 0.00 s = S`) reads as passed by the `.` of its
 * duration, and an error as failed.
 */
export function parseMinitest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = MINITEST.exec(pyStrip(line));
    if (m) map.set(m[1]!, m[2] === '.' ? 'PASSED' : 'FAILED');
  }
  return map;
}

const CUCUMBER = /^(.*) \.+(\.|F)/s;

/** `<name> ....F`-shaped lines; cucumber's own progress format (`...FU` alone) gives none. */
export function parseCucumber(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = CUCUMBER.exec(pyStrip(line));
    if (m) map.set(m[1]!, m[2] === '.' ? 'PASSED' : 'FAILED');
  }
  return map;
}

const NOT_WORD = `(?!${PY_WORD})`;
const RUBY_UNIT = new RegExp(`^\\s*(?:test: )?(.+):\\s+(\\.|E${NOT_WORD}|F${NOT_WORD}|O${NOT_WORD})`, 'su');

/**
 * test-unit's `  test_name:\t\t.: (0.000s)`; a `test "..."` block's `test: ` prefix is dropped and
 * the name runs to the last `:` before the outcome; sub_test_case contexts are not part of a name.
 * Omitted (O) is SKIPPED; pending (P) and notifications are not read.
 */
export function parseRubyUnit(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = RUBY_UNIT.exec(pyStrip(line));
    if (!m) continue;
    map.set(m[1]!, m[2] === '.' ? 'PASSED' : m[2] === 'O' ? 'SKIPPED' : 'FAILED');
  }
  return map;
}

const RSPEC = /^(.+) - (passed|failed)/s;

/**
 * `<description> - <status>` lines from the jq transforms of `rspec --format json`; the name is
 * everything before the last ` - passed|failed` (fastlane's transform puts the example id in it);
 * pending examples are not read. Any other line holding ` - failed` is read too, such as the
 * traced jq program of rubocop's transform.
 */
export function parseRspecTransformedJson(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = RSPEC.exec(pyStrip(line));
    if (m) map.set(m[1]!, m[2] === 'passed' ? 'PASSED' : 'FAILED');
  }
  return map;
}
