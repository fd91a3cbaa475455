/**
 * Reading an eval log: which apply command took the model patch (or that none did), whether the
 * harness's bad-outcome markers appear, and the test output between the markers, split exactly
 * as the harness splits it.
 */
import { appliedLine } from './eval-script.js';
import type { LogParser } from './parsers/registry.js';
import {
  APPLY_PATCH_FAIL,
  END_TEST_OUTPUT,
  GIT_APPLY_CMDS,
  RESET_FAILED,
  START_TEST_OUTPUT,
  TESTS_ERROR,
  TESTS_TIMEOUT,
  type ApplyCommand,
} from './markers.js';
import type { StatusMap } from './status.js';

export interface LogAnalysis {
  /** The command that applied the model patch; null if none did or there was no patch. */
  appliedWith: ApplyCommand | null;
  /** The apply chain ran and every command in it failed. */
  applyFailed: boolean;
  /** Harness markers whose presence anywhere in the log voids grading. */
  badCodes: string[];
  /** Text between the start and end markers; null when either marker is missing. */
  testOutput: string | null;
}

export function analyzeLog(log: string): LogAnalysis {
  const startAt = log.indexOf(START_TEST_OUTPUT);
  // Only what precedes the tests decides how the patch applied: test output cannot forge it.
  const preamble = (startAt === -1 ? log : log.slice(0, startAt)).split('\n');
  const appliedWith = GIT_APPLY_CMDS.find((cmd) => preamble.includes(appliedLine(cmd))) ?? null;
  const applyFailed = appliedWith === null && preamble.includes(APPLY_PATCH_FAIL);
  const badCodes = [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT].filter((c) => log.includes(c));
  let testOutput: string | null = null;
  if (startAt !== -1 && log.includes(END_TEST_OUTPUT)) {
    // Python's content.split(START)[1].split(END)[0]: up to the next start marker, then to the first end marker.
    const afterStart = log.slice(startAt + START_TEST_OUTPUT.length);
    const nextStart = afterStart.indexOf(START_TEST_OUTPUT);
    const piece = nextStart === -1 ? afterStart : afterStart.slice(0, nextStart);
    const endAt = piece.indexOf(END_TEST_OUTPUT);
    testOutput = endAt === -1 ? piece : piece.slice(0, endAt);
  }
  return { appliedWith, applyFailed, badCodes, testOutput };
}

/**
 * The harness's status map: none when a bad marker appears or the markers are missing; otherwise
 * the parse of the section between the markers or, if that yields nothing, of everything from the
 * start marker on. (The harness falls back to the whole log; the part before the start marker is
 * left out here because it echoes the patch's own lines, which a patch could fill with fake results
 * and then make the real test run print nothing.)
 */
export function statusMapOf(log: string, analysis: LogAnalysis, parser: LogParser): { found: boolean; statusMap: StatusMap } {
  if (analysis.badCodes.length > 0 || analysis.testOutput === null) return { found: false, statusMap: new Map() };
  let statusMap = parser(analysis.testOutput);
  if (statusMap.size === 0) statusMap = parser(log.slice(log.indexOf(START_TEST_OUTPUT)));
  return { found: true, statusMap };
}
