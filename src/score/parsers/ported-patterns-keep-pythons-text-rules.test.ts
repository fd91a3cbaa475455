/**
 * The harness's parsers run Python's `re` and `str.strip()`; where JavaScript's rules differ (what
 * is whitespace, what `.` and `\w` match) the ports follow Python. Each expectation here is what the
 * harness's own parser returns for the same input.
 */
import { expect, it } from 'vitest';
import { pyStrip } from './py-text.js';
import { getParser } from './registry.js';

const parse = (parser: string, log: string) => Object.fromEntries(getParser(parser)(log));

it('strips what Python strips: CR, no-break space and the \\x1c-\\x1f separators, not a byte-order mark', () => {
  expect(parse('gotest', '--- PASS: TestA (0.00s)\r\n\u00a0--- FAIL: TestB (0.01s)\x1c\n')).toEqual({ TestA: 'PASSED', TestB: 'FAILED' });
  expect(pyStrip('\ufeffx\x1f')).toBe('\ufeffx');
});

it("keeps a CR in names where the harness does not strip (karma's tree), as Python's `.` matches it", () => {
  expect(parse('karma', 'Starting browser X\r\n  suite\r\n    ✔ a test\r\nSUMMARY:\r\n')).toEqual({ 'suite\r > a test\r': 'PASSED' });
});

it('reads `\\w` as Python does, letters of any script included', () => {
  expect(parse('phpunit', 'Ünïcode Suite (Ns\\Ünïcode)\n ✔ Works\n')).toEqual({ 'Ünïcode Suite > Works': 'PASSED' });
  expect(parse('cargo', 'test tests::é ... ok\ntest tests::x ... okay\n')).toEqual({ 'tests::é': 'PASSED' });
});
