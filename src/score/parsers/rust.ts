/**
 * `cargo test` (libtest) output, read as the SWE-bench harness reads it for its Rust repositories:
 * `test path::to::name ... ok|FAILED`. Only ok and FAILED are results: an ignored test, a
 * `should panic` test (` - should panic ... ok`) and a doc test (`src/lib.rs - f (line 3)`, a name
 * with spaces) are not, so they count as missing; a line of a test's captured output shaped like a
 * result is read too, as the harness reads it.
 */
import type { StatusMap } from '../status.js';
import { lines, PY_WORD, pyStrip } from './py-text.js';

const RESULT = new RegExp(`^test\\s+(\\S+)\\s+\\.\\.\\.\\s+(${PY_WORD}+)$`, 'su');

export function parseCargo(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = RESULT.exec(pyStrip(line));
    if (!m) continue;
    if (m[2] === 'ok') map.set(m[1]!, 'PASSED');
    else if (m[2] === 'FAILED') map.set(m[1]!, 'FAILED');
  }
  return map;
}
