/**
 * Java test logs, read as the SWE-bench harness reads them for its Java repositories. Maven
 * (gson, druid, javaparser): one `mvn test -Dtest=Class#method` per test, named by the `-Dtest=`
 * of its traced command line (the eval script's `set -x`) and judged by the BUILD SUCCESS or
 * FAILURE that follows, first in first out. Ant (lombok): `[junit] [PASS|FAIL|ERR] name` lines of
 * lombok's formatter. Gradle (lucene, rxjava, with the harness's testLogging patch):
 * `Class > method PASSED|FAILED`, or the name and the status on two lines when output interleaves.
 */
import type { StatusMap, TestStatus } from '../status.js';
import { lines, pyStrip } from './py-text.js';

const DTEST = /^.*-Dtest=(\S+).*$/s;
const BUILD = /^.*BUILD (SUCCESS|FAILURE)$/s;

const buildStatus = (s: string): TestStatus => (s === 'SUCCESS' ? 'PASSED' : 'FAILED');

/**
 * A test that runs and is skipped still ends in BUILD SUCCESS, so it reads as PASSED; a command
 * with no BUILD line (the JVM died) leaves its test missing.
 */
export function parseMaven(log: string): StatusMap {
  const map: StatusMap = new Map();
  const pending: string[] = [];
  const unmatched: string[] = [];
  for (const raw of lines(log)) {
    const line = pyStrip(raw);
    const t = DTEST.exec(line);
    if (t) pending.push(t[1]!);
    const b = BUILD.exec(line);
    if (!b) continue;
    const test = pending.shift();
    if (test === undefined) unmatched.push(b[1]!);
    else map.set(test, buildStatus(b[1]!));
  }
  // results printed before their command's trace line pair up in order
  while (pending.length > 0 && unmatched.length > 0) map.set(pending.shift()!, buildStatus(unmatched.shift()!));
  return map;
}

const ANT = /^\s*\[junit\]\s+\[(PASS|FAIL|ERR)\]\s+(.*)$/s;

/**
 * The last line for a name wins. Ant calls a formatter's endTest after addFailure and addError too,
 * so a formatter that prints a line per event (as lombok's does) ends every test on `[PASS]`.
 */
export function parseAnt(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of lines(log)) {
    const m = ANT.exec(pyStrip(line));
    if (m) map.set(m[2]!, m[1] === 'PASS' ? 'PASSED' : 'FAILED');
  }
  return map;
}

const GRADLE_FULL = /^([^>].+)\s+(PASSED|FAILED)$/s;
const GRADLE_NAME = /^([^>]\S*\s+>\s+\S+)$/s;
const GRADLE_STATUS = /^(PASSED|FAILED)$/s;

/** SKIPPED tests are not read; any other line ending in ` PASSED`/` FAILED` (`:test FAILED`) is taken for a test. */
export function parseGradleCustom(log: string): StatusMap {
  const map: StatusMap = new Map();
  let pending: string | null = null;
  for (const raw of lines(log)) {
    const line = pyStrip(raw);
    const full = GRADLE_FULL.exec(line);
    if (full) {
      map.set(full[1]!, full[2] === 'PASSED' ? 'PASSED' : 'FAILED');
      pending = null;
      continue;
    }
    const name = GRADLE_NAME.exec(line);
    if (name) {
      pending = name[1]!;
      continue;
    }
    if (pending === null) continue;
    const status = GRADLE_STATUS.exec(line);
    if (status) {
      map.set(pending, status[1] === 'PASSED' ? 'PASSED' : 'FAILED');
      pending = null;
    }
  }
  return map;
}
