/**
 * One SWE-bench task instance (a JSONL row). FAIL_TO_PASS / PASS_TO_PASS are JSON strings in the
 * classic datasets and lists in newer ones; both parse to lists. Fields this schema does not know
 * are kept, since graders and agents read dataset-specific extras.
 */
import { z } from 'zod';
import { CommitSchema } from '../recipe/schema.js';

/** A list of test names, given as a list or as a JSON string holding one. */
export const TestListSchema = z.union([
  z.array(z.string()),
  z.string().transform((s, ctx): string[] => {
    let v: unknown;
    try {
      v = JSON.parse(s);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'expected a list of test names or a JSON string holding one' });
      return z.NEVER;
    }
    const r = z.array(z.string()).safeParse(v);
    if (!r.success) {
      ctx.addIssue({ code: 'custom', message: 'the JSON string must hold a list of test names (strings)' });
      return z.NEVER;
    }
    return r.data;
  }),
]);

export const InstanceIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9_][A-Za-z0-9._+@=-]*$/, 'expected an instance id of letters, digits and . _ + @ = - (it becomes part of a ref name)');

export const RepoNameSchema = z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, 'expected owner/name');

export const DatasetRowSchema = z.looseObject({
  instance_id: InstanceIdSchema,
  repo: RepoNameSchema,
  base_commit: CommitSchema,
  /** Always a string: a JSON number would have lost its spelling ("3.0" vs 3). */
  version: z.string().min(1, 'expected a version string such as "3.0"'),
  environment_setup_commit: CommitSchema.optional(),
  patch: z.string().default(''),
  test_patch: z.string().default(''),
  FAIL_TO_PASS: TestListSchema.default([]),
  PASS_TO_PASS: TestListSchema.default([]),
});
export type DatasetRow = z.output<typeof DatasetRowSchema>;

/** A row and where it came from, for error messages (`dataset.jsonl:17`). */
export interface LocatedRow {
  row: DatasetRow;
  where: string;
}
