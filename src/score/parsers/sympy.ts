/**
 * SymPy's `bin/test` output, read as the SWE-bench harness reads it: per-test lines
 * `test_name ok|F|E` (with `-v`), plus the failure banners `____ sympy/x/tests/test_y.py:test_z ____`.
 */
import type { StatusMap } from '../status.js';

export function parseSympy(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const m of log.matchAll(/(_*) (.*)\.py:(.*) (_*)/g)) map.set(`${m[2]}.py:${m[3]}`, 'FAILED');
  for (const raw of log.split('\n')) {
    const line = raw.trim();
    if (!line.startsWith('test_')) continue;
    const name = line.split(/\s+/)[0]!;
    if (line.endsWith(' E')) map.set(name, 'ERROR');
    if (line.endsWith(' F')) map.set(name, 'FAILED');
    if (line.endsWith(' ok')) map.set(name, 'PASSED');
  }
  return map;
}
