/**
 * Marker lines the SWE-bench harness writes into an evaluation log. They are kept byte-identical
 * so that logs from either tool can be graded by the other.
 */
export const START_TEST_OUTPUT = '>>>>> Start Test Output';
export const END_TEST_OUTPUT = '>>>>> End Test Output';
export const APPLY_PATCH_PASS = '>>>>> Applied Patch';
export const APPLY_PATCH_FAIL = '>>>>> Patch Apply Failed';
export const RESET_FAILED = '>>>>> Reset Failed';
export const TESTS_ERROR = '>>>>> Tests Errored';
export const TESTS_TIMEOUT = '>>>>> Tests Timed Out';

/** The harness's apply chain, tried in order; the first that exits 0 wins. */
export const GIT_APPLY_CMDS = ['git apply --verbose', 'git apply --verbose --reject', 'patch --batch --fuzz=5 -p1 -i'] as const;
export type ApplyCommand = (typeof GIT_APPLY_CMDS)[number];
