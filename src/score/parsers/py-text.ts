/**
 * Python's text rules, where the SWE-bench harness's parsers lean on them and JavaScript's differ:
 * `str.strip()` (its whitespace includes \x1c-\x1f and \x85, not \ufeff) and `\w` in a `re` str
 * pattern (Unicode letters and digits, not ASCII only). The ported patterns also use the `s` flag:
 * on one line (no \n), Python's `.` matches everything, JavaScript's stops at \r.
 */

const PY_SPACE = '[\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const STRIP = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, 'gu');

/** Python's `str.strip()` with no argument. */
export function pyStrip(s: string): string {
  return s.replace(STRIP, '');
}

/** Python's `\w` in a str pattern (use with the `u` flag). */
export const PY_WORD = '[\\p{L}\\p{N}_]';

/** Python's `log.split("\n")`. */
export function lines(log: string): string[] {
  return log.split('\n');
}
