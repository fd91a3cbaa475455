/**
 * The dataset-row fields scoring needs. The dataset module (src/dataset/row.ts) owns the full
 * SWE-bench row schema; this is the narrower view scoring depends on (a DatasetRow always parses
 * through it), so the reward API also takes rows from elsewhere, e.g. a numeric version.
 */
import { z } from 'zod';
import { TestListSchema } from '../dataset/row.js';
import { InvalidInputError } from '../errors.js';

export const ScoreInstanceSchema = z.looseObject({
  instance_id: z.string().min(1),
  repo: z.string().min(1),
  base_commit: z.string().regex(/^[0-9a-f]{7,64}$/, 'expected a commit id (hex)'),
  /** A number in some dumps (e.g. 3.0 for Django): keep the string form. */
  version: z.union([z.string(), z.number()]).transform(String).default(''),
  /** The gold patch. */
  patch: z.string().default(''),
  test_patch: z.string(),
  FAIL_TO_PASS: TestListSchema,
  PASS_TO_PASS: TestListSchema,
});
export type ScoreInstance = z.output<typeof ScoreInstanceSchema>;
export type ScoreInstanceInput = z.input<typeof ScoreInstanceSchema>;

export function parseScoreInstance(row: unknown, where = 'dataset row'): ScoreInstance {
  const r = ScoreInstanceSchema.safeParse(row);
  if (!r.success) {
    throw new InvalidInputError(
      `${where}: ${z.prettifyError(r.error)}`,
      'each row needs instance_id, repo, base_commit, test_patch, FAIL_TO_PASS and PASS_TO_PASS (lists or JSON strings)',
    );
  }
  return r.data;
}
