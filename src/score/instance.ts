/**
 * The dataset-row fields scoring needs. The dataset module (src/dataset/) owns the full SWE-bench
 * row schema; until it lands this is the narrow view scoring depends on, and any richer row
 * (extra fields are allowed) parses through it.
 */
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';

/**
 * FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded strings in the classic datasets
 * (SWE-bench, Lite, Verified) and plain lists in newer ones; both become a list.
 */
export const TestListSchema = z.union([
  z.array(z.string()),
  z.string().transform((s, ctx) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(s);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'expected a list of test names or a JSON string encoding one' });
      return z.NEVER;
    }
    const list = z.array(z.string()).safeParse(parsed);
    if (!list.success) {
      ctx.addIssue({ code: 'custom', message: 'the JSON string does not encode a list of test names' });
      return z.NEVER;
    }
    return list.data;
  }),
]);

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
