/**
 * C and C++ test logs, read as the SWE-bench harness reads them for its C/C++ repositories: redis
 * and valkey's Tcl suite (`[ok]: name (N ms)`), automake's `make check` (jq: `PASS:`/`FAIL:`),
 * doctest's XML reporter (nlohmann/json: `-s -r=xml`), MicroPython's run-tests.py and googletest
 * through `ctest -V` (fmt). Catch2's XML reporter and CTest's own result lines are read too (no
 * harness repository uses them).
 */
import type { StatusMap, TestStatus } from '../status.js';
import { lines, pyStrip } from './py-text.js';
import { descendants, documentsIn } from './xml.js';

const REDIS = /^\[(ok|err|skip|ignore)\]:\s(.+?)(?:\s\((\d+\s*m?s)\))?$/s;

/** `[ok]: name (3 ms)`; a failure's `in tests/unit/x.tcl` suffix is not part of its name; skip and ignore are skips. */
export function parseRedis(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = REDIS.exec(pyStrip(line));
    if (!m) continue;
    const [, status, name] = m as unknown as [string, string, string];
    if (status === 'ok') map.set(name, 'PASSED');
    else if (status === 'err') map.set(name.replace(/\s+in\s+\S+$/s, ''), 'FAILED');
    else map.set(name, 'SKIPPED');
  }
  return map;
}

const AUTOMAKE = /^\s*(PASS|FAIL):\s(.+)$/s;

/** automake's test driver lines; only PASS and FAIL are read (SKIP, XFAIL, XPASS and ERROR are not). */
export function parseJq(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = AUTOMAKE.exec(pyStrip(line));
    if (m) map.set(m[2]!, m[1] === 'PASS' ? 'PASSED' : 'FAILED');
  }
  return map;
}

/**
 * doctest's XML report (the first `<doctest>` document in the log): one result per SubCase, named
 * `<test case> > <subcase>`, passed when every assertion below it succeeded (so one with no
 * assertion, e.g. one that threw, passed). A test case without subcases gets no result, and a
 * subcase name that repeats (nested subcases re-entered) keeps its last result.
 */
export function parseDoctest(log: string): StatusMap {
  const map: StatusMap = new Map();
  const root = documentsIn(log, ['doctest'])[0];
  if (root === undefined) return map;
  for (const tc of descendants(root, 'TestCase')) {
    for (const sc of descendants(tc, 'SubCase')) {
      const ok = descendants(sc, 'Expression').every((e) => e.attrs.success === 'true');
      // Python formats a missing attribute as None
      map.set(`${tc.attrs.name ?? 'None'} > ${sc.attrs.name ?? 'None'}`, ok ? 'PASSED' : 'FAILED');
    }
  }
  return map;
}

const MICROPYTHON = /^(pass|FAIL|skip)\s+(.+)$/s;

/** MicroPython's run-tests.py: `pass basics/fun1.py`, `FAIL ...`, `skip ...`. */
export function parseMicropythonTest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = MICROPYTHON.exec(pyStrip(line));
    if (!m) continue;
    map.set(m[2]!, m[1] === 'pass' ? 'PASSED' : m[1] === 'FAIL' ? 'FAILED' : 'SKIPPED');
  }
  return map;
}

const GTEST = /^.*\[\s*(OK|FAILED)\s*\]\s(.*)\s\(.*\)$/s;

/**
 * googletest's `[       OK ] Suite.Test (0 ms)` and `[  FAILED  ] ...` lines, anywhere on a line
 * (ctest -V prefixes them with `N: `). The name runs to the last ` (`, so a parameterized failure
 * keeps its `, where GetParam() = 5`; summary lines without a duration are not results; skipped
 * and disabled tests are not read.
 */
export function parseGoogletest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = GTEST.exec(pyStrip(line));
    if (m) map.set(m[2]!, m[1] === 'OK' ? 'PASSED' : 'FAILED');
  }
  return map;
}

/**
 * Catch2's XML reporter (`-r xml`; v2's `<Catch>` and v3's `<Catch2TestRun>` roots), one result per
 * test case from its OverallResult: a `[!shouldfail]` case that failed as it should is XFAIL, a v3
 * case that skipped is SKIPPED. Several reports in one log (one per test binary) are all read.
 */
export function parseCatch2(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const root of documentsIn(log, ['Catch', 'Catch2TestRun'])) {
    for (const tc of descendants(root, 'TestCase')) {
      const name = tc.attrs.name;
      const overall = tc.children.find((c) => c.name === 'OverallResult');
      if (name === undefined || overall === undefined) continue;
      let status: TestStatus = overall.attrs.success === 'true' ? 'PASSED' : 'FAILED';
      if (status === 'PASSED' && (tc.attrs.tags ?? '').includes('[!shouldfail]')) status = 'XFAIL';
      if (Number(overall.attrs.skips ?? 0) > 0) status = 'SKIPPED';
      map.set(name, status);
    }
  }
  return map;
}

const CTEST = /^\s*\d+\/\d+\s+Test\s+#\s*\d+:\s+(.+?)\s+\.+\s*(?:\*\*\*)?(.+?)\s+[\d.]+\s+sec\s*$/s;

/**
 * CTest's own result lines (`1/8 Test #2: name .....   Passed    0.01 sec`, with or without -V):
 * Passed is PASSED; Skipped (SKIP_RETURN_CODE) and `Not Run (Disabled)` are SKIPPED; Failed,
 * Timeout, `Exception: SegFault`, `Not Run` (no executable) and the like are FAILED.
 */
export function parseCtest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = CTEST.exec(line);
    if (!m) continue;
    const result = m[2]!;
    const status: TestStatus = result === 'Passed' ? 'PASSED' : result === 'Skipped' || result === 'Not Run (Disabled)' ? 'SKIPPED' : 'FAILED';
    map.set(m[1]!, status);
  }
  return map;
}
