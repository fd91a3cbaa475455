/**
 * Test statuses as the SWE-bench harness names them. A log parser maps test names to these;
 * grading reads nothing else from a log.
 */
import { z } from 'zod';

export const TestStatusSchema = z.enum(['PASSED', 'FAILED', 'SKIPPED', 'ERROR', 'XFAIL']);
export type TestStatus = z.infer<typeof TestStatusSchema>;
export const TEST_STATUSES = TestStatusSchema.options;

/** Test name -> status. A Map keeps insertion order and never collides with prototype keys. */
export type StatusMap = Map<string, TestStatus>;
