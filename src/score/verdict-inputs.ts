/**
 * What decides a verdict, as digests stored with each result: the dataset row's fields scoring
 * reads (not its problem statement or hints), the eval spec (defaults filled in), the environment
 * the eval ran in and the patch. A rerun of a run reuses an earlier result only when all four are
 * the same, so a changed input is graded again instead of reported from before.
 */
import { z } from 'zod';
import { canonicalJson } from '../cas/canonical-json.js';
import { sha256 } from '../cas/digest.js';
import type { ScoreInstance } from './instance.js';
import type { EvalSpec } from './spec.js';

export const VERDICT_INPUTS = ['row', 'spec', 'environment', 'patch'] as const;
export type VerdictInput = (typeof VERDICT_INPUTS)[number];

export const VerdictInputsSchema = z.object({
  row: z.string(),
  spec: z.string(),
  /** The environment's digest; absent when the caller grades without naming one (a host runner). */
  environment: z.string().optional(),
  patch: z.string(),
});
export type VerdictInputs = z.infer<typeof VerdictInputsSchema>;

export function verdictInputs(instance: ScoreInstance, spec: EvalSpec, patch: string | null, environment: string | undefined): VerdictInputs {
  const row = {
    instance_id: instance.instance_id,
    repo: instance.repo,
    version: instance.version,
    base_commit: instance.base_commit,
    test_patch: instance.test_patch,
    FAIL_TO_PASS: instance.FAIL_TO_PASS,
    PASS_TO_PASS: instance.PASS_TO_PASS,
  };
  return {
    row: sha256(canonicalJson(row)),
    spec: sha256(canonicalJson(spec)),
    ...(environment === undefined ? {} : { environment }),
    // null (no prediction) and '' (an empty one) are different inputs
    patch: sha256(canonicalJson(patch)),
  };
}

export interface Regrade {
  instance_id: string;
  /** Which inputs differ from the earlier result's; empty when it recorded none. */
  changed: VerdictInput[];
  /** For people: "spec changed", "patch and environment changed". */
  reason: string;
}

/** Why an earlier result may not stand for `now`, or null when it may. */
export function regradeReason(instanceId: string, earlier: VerdictInputs | undefined, now: VerdictInputs): Regrade | null {
  if (earlier === undefined) return { instance_id: instanceId, changed: [], reason: 'its earlier result does not record its inputs' };
  const changed = VERDICT_INPUTS.filter((k) => earlier[k] !== now[k]);
  if (changed.length === 0) return null;
  const names = changed.length === 1 ? changed[0]! : `${changed.slice(0, -1).join(', ')} and ${changed.at(-1)!}`;
  return { instance_id: instanceId, changed, reason: `${names} changed` };
}
