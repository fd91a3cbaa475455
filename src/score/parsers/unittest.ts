/**
 * Plain `python -m unittest -v` output. A test is named as unittest prints it before ` ... `:
 * `test_x (pkg.mod.Class)` (Python < 3.11) or `test_x (pkg.mod.Class.test_x)` (3.11+). Handled:
 * a docstring line printed between the name and the result, a result on a later line after the
 * test's own output, the `FAIL:`/`ERROR:` banners, skips, expected failures and unexpected successes.
 */
import type { StatusMap, TestStatus } from '../status.js';

const HEADER = /^(\S+ \([\w.]+\))$/;
const RESULT = /^(.*?) \.\.\.(?: (.*))?$/;
/** `test_x (mod.Class.test_x) (i=1)`: one subtest of test_x. */
const SUBTEST = /^(\S+ \([\w.]+\)) \(.*\)$/;

function statusOf(result: string): TestStatus | null {
  const r = result.trim();
  if (r === 'ok') return 'PASSED';
  if (r === 'FAIL') return 'FAILED';
  if (r === 'ERROR') return 'ERROR';
  if (r === 'expected failure') return 'XFAIL';
  if (r === 'unexpected success') return 'FAILED';
  if (r.startsWith('skipped')) return 'SKIPPED';
  return null;
}

/** A failing subtest fails its test too (unittest prints no result line for the parent then). */
function setResult(map: StatusMap, name: string, status: TestStatus): void {
  map.set(name, status);
  const sub = SUBTEST.exec(name);
  if (sub && (status === 'FAILED' || status === 'ERROR')) map.set(sub[1]!, status);
}

export function parseUnittest(log: string): StatusMap {
  const map: StatusMap = new Map();
  let header: string | null = null; // a name printed alone: the next line is its docstring
  let pending: string | null = null; // a test whose result has not been printed yet
  for (const raw of log.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const banner = /^(FAIL|ERROR): (.+)$/.exec(line);
    if (banner) {
      setResult(map, banner[2]!.trim(), banner[1] === 'FAIL' ? 'FAILED' : 'ERROR');
      pending = null;
      continue;
    }
    const h = HEADER.exec(line);
    if (h) {
      header = h[1]!;
      continue;
    }
    const r = RESULT.exec(line);
    if (r) {
      const name = header ?? r[1]!.trim();
      header = null;
      const status = statusOf(r[2] ?? '');
      if (status === null) pending = name;
      else {
        setResult(map, name, status);
        if (!SUBTEST.test(name)) pending = null;
      }
      continue;
    }
    header = null;
    if (pending !== null) {
      const status = statusOf(line);
      if (status !== null) {
        map.set(pending, status);
        pending = null;
      }
    }
  }
  return map;
}
