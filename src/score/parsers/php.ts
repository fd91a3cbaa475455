/**
 * PHPUnit `--testdox` output, read as the SWE-bench harness reads it for its PHP repositories: a
 * header `Prettified Class (Namespace\Class)` opens a suite, and `✔ title` / `✘ title` / `↩ title`
 * under it is `Suite > title`. PHPUnit writes the `(Namespace\Class)` part for namespaced classes
 * only; under a header without it the harness has no suite yet (or still the previous one), and
 * Python spells "no suite" None. Incomplete (∅) and risky (⚠, ☢) tests are not read.
 */
import type { StatusMap, TestStatus } from '../status.js';
import { lines, PY_WORD } from './py-text.js';

const SUITE = new RegExp(`^(${PY_WORD}.+) \\(.+\\)$`, 'su');
const TEST = /^\s*([\u{2714}\u{2718}\u{21a9}])\s*(.*)$/su;
const STATUS: Readonly<Record<string, TestStatus>> = { '✔': 'PASSED', '✘': 'FAILED', '↩': 'SKIPPED' };

export function parsePhpunit(log: string): StatusMap {
  const map: StatusMap = new Map();
  let suite = 'None';
  for (const line of lines(log)) {
    const s = SUITE.exec(line);
    if (s) {
      suite = s[1]!;
      continue;
    }
    const t = TEST.exec(line);
    if (t) map.set(`${suite} > ${t[2]!}`, STATUS[t[1]!]!);
  }
  return map;
}
