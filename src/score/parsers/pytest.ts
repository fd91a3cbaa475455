/**
 * pytest `-rA` result lines, read exactly as the SWE-bench harness reads them, because the
 * FAIL_TO_PASS / PASS_TO_PASS lists of the datasets were produced by that reading: a test name is
 * the first whitespace-free token (so a parametrized id with a space is cut at the space, as in the
 * datasets), and a FAILED line's ` - <message>` is never part of the name.
 */
import { TEST_STATUSES, type StatusMap, type TestStatus } from '../status.js';

const STATUS = TEST_STATUSES.join('|');
const STATUS_FIRST = new RegExp(`^(${STATUS})\\s+(\\S+)`);
const TEST_FIRST = new RegExp(`^(\\S+)\\s+(${STATUS})(?:\\s|$)`);
/** `SKIPPED [3] tests/x.py:12: reason` is a grouped skip summary, not a test. */
const SKIP_COUNT = /^\[\d+\]/;

export function parsePytestLine(line: string): [name: string, status: TestStatus] | null {
  const first = STATUS_FIRST.exec(line);
  if (first) {
    const status = first[1] as TestStatus;
    let name = first[2]!;
    if (status === 'FAILED') name = line.replaceAll(' - ', ' ').split(/\s+/)[1] ?? name;
    if (status === 'SKIPPED' && SKIP_COUNT.test(name)) return null;
    return [name, status];
  }
  const second = TEST_FIRST.exec(line);
  if (second) return [second[1]!, second[2] as TestStatus];
  return null;
}

export function parsePytest(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of log.split('\n')) {
    const r = parsePytestLine(line);
    if (r) map.set(r[0], r[1]);
  }
  return map;
}

/** Colour codes and control characters stripped first (astropy, scikit-learn, sphinx). */
export function parsePytestV2(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const raw of log.split('\n')) {
    // eslint-disable-next-line no-control-regex
    const line = raw.replace(/\[(\d+)m/g, '').replace(/[\x01-\x1f]/g, '');
    const r = parsePytestLine(line);
    if (r) map.set(r[0], r[1]);
  }
  return map;
}

/** Long path-valued parameters are shortened to their last component (requests, pylint, pydicom). */
export function normalizeOptionName(name: string): string {
  const m = /^(.*?)\[(.*)\]/.exec(name);
  if (!m) return name;
  let option = m[2]!;
  if (option.startsWith('/') && !option.startsWith('//') && !option.includes('*')) option = `/${option.split('/').at(-1)!}`;
  return `${m[1]}[${option}]`;
}

export function parsePytestOptions(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of log.split('\n')) {
    const r = parsePytestLine(line);
    if (r) map.set(normalizeOptionName(r[0]), r[1]);
  }
  return map;
}

/** matplotlib's ids hold enum reprs that the datasets spell as numbers. */
export function parseMatplotlib(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (let line of log.split('\n')) {
    line = line.replaceAll('MouseButton.LEFT', '1').replaceAll('MouseButton.RIGHT', '3');
    const status = TEST_STATUSES.find((s) => line.startsWith(s));
    if (status === undefined) continue;
    if (status === 'FAILED') line = line.replaceAll(' - ', ' ');
    const parts = line.split(/\s+/).filter((p) => p !== '');
    if (parts.length <= 1) continue;
    map.set(parts[1]!, parts[0] as TestStatus);
  }
  return map;
}

/** seaborn's logs: only PASSED and FAILED are read, in either order. */
export function parseSeaborn(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const line of log.split('\n')) {
    const parts = line.split(/\s+/).filter((p) => p !== '');
    if (line.startsWith('FAILED')) {
      if (parts[1] !== undefined) map.set(parts[1], 'FAILED');
    } else if (line.includes(' PASSED ')) {
      if (parts[1] === 'PASSED' && parts[0] !== undefined) map.set(parts[0], 'PASSED');
    } else if (line.startsWith('PASSED')) {
      if (parts[1] !== undefined) map.set(parts[1], 'PASSED');
    }
  }
  return map;
}
