/**
 * `go test` logs. `gotest` reads `go test -v` as the SWE-bench harness does for its Go repositories:
 * `--- PASS|FAIL|SKIP: Name (0.00s)` lines, subtests included (`TestTable/case_name`), indented or
 * not; a line of the test's own output shaped exactly like one is read too, as the harness reads it.
 * `gotest_json` reads `go test -json` (test2json events), naming tests the same way, so a dataset's
 * lists grade alike under either.
 */
import { z } from 'zod';
import type { StatusMap, TestStatus } from '../status.js';
import { lines, pyStrip } from './py-text.js';

const RESULT = /^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$/s;
const STATUS: Readonly<Record<string, TestStatus>> = { PASS: 'PASSED', FAIL: 'FAILED', SKIP: 'SKIPPED' };
const ACTION: ReadonlyMap<string, TestStatus> = new Map([
  ['pass', 'PASSED'],
  ['fail', 'FAILED'],
  ['skip', 'SKIPPED'],
]);

export function parseGotest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = RESULT.exec(pyStrip(line));
    if (m) map.set(m[2]!, STATUS[m[1]!]!);
  }
  return map;
}

/** One test2json event; only a test's final action (pass, fail, skip) is a result. */
const EventSchema = z.object({ Action: z.string(), Test: z.string().optional() });

/**
 * test2json lines among whatever else the log holds (the eval script's trace, build output); a
 * package-level event (no Test) is not a test. A package that fails to build reports no test at
 * all, so its tests are missing from the log.
 */
export function parseGotestJson(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const raw of lines(log)) {
    const line = raw.trim();
    if (!line.startsWith('{')) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      continue;
    }
    const e = EventSchema.safeParse(value);
    if (!e.success || e.data.Test === undefined) continue;
    const status = ACTION.get(e.data.Action);
    if (status !== undefined) map.set(e.data.Test, status);
  }
  return map;
}
