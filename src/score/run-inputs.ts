/**
 * A run's inputs, checked before its first instance is graded (`score`; `validate` checks its
 * specs the same way): every prediction names an instance of the dataset, every instance to grade
 * has a spec that parses and names a known log parser, and (when the caller says what instances
 * are graded in) every environment resolves. A bad input is one error that lists every offender,
 * never a run that grades some instances and then reports the others as errors. What comes out
 * carries each instance's verdict inputs, which decide reuse.
 */
import { errorMessage, MinisandboxError } from '../errors.js';
import { runPool } from '../util/pool.js';
import type { ScoreInstance } from './instance.js';
import { getParser } from './parsers/registry.js';
import type { Prediction } from './predictions.js';
import { parseEvalSpec } from './score-instance.js';
import type { EvalSpec, EvalSpecInput } from './spec.js';
import { type VerdictInputs, verdictInputs } from './verdict-inputs.js';

export interface PreparedPrediction {
  instance: ScoreInstance;
  prediction: Prediction;
  spec: EvalSpec;
  inputs: VerdictInputs;
}

export type EnvironmentOf = (instance: ScoreInstance) => string | Promise<string>;

const LISTED = 10;

/** One error for many: every distinct message (the first ten), the code they share (else the first's). */
function oneError(errors: unknown[]): MinisandboxError {
  const messages = [...new Set(errors.map(errorMessage))];
  const hints = [...new Set(errors.flatMap((e) => (e instanceof MinisandboxError && e.hint !== undefined ? [e.hint] : [])))];
  const first = errors[0];
  const code = first instanceof MinisandboxError && errors.every((e) => e instanceof MinisandboxError && e.code === first.code) ? first.code : 'INVALID_INPUT';
  const more = messages.length > LISTED ? `\n... and ${messages.length - LISTED} more` : '';
  const hint = hints.slice(0, 3).join('; ') + (hints.length > 3 ? '; ...' : '');
  return new MinisandboxError(code, `${messages.slice(0, LISTED).join('\n')}${more}`, hint === '' ? {} : { hint });
}

/** `fn` over every item; if any throw, one error for all of them (after every item was tried). */
async function checkEach<T, R>(items: readonly T[], concurrency: number, fn: (item: T) => R | Promise<R>): Promise<R[]> {
  const out: R[] = [];
  const errors: unknown[] = [];
  const indexed = items.map((item, i) => ({ item, i }));
  await runPool(indexed, concurrency, async ({ item, i }) => {
    try {
      out[i] = await fn(item);
    } catch (e) {
      errors.push(e);
    }
  });
  if (errors.length > 0) throw oneError(errors);
  return out;
}

/** Every instance's spec, parsed and with a known log parser; one error naming every instance whose spec is not. */
export async function checkSpecs(instances: readonly ScoreInstance[], specs: (instance: ScoreInstance) => EvalSpecInput): Promise<EvalSpec[]> {
  return checkEach(instances, 1, (instance) => {
    const spec = parseEvalSpec(specs(instance));
    getParser(spec.parser);
    return spec;
  });
}

export async function prepareRun(
  byId: ReadonlyMap<string, ScoreInstance>,
  predictions: readonly Prediction[],
  specs: (instance: ScoreInstance) => EvalSpecInput,
  opts: { environmentOf?: EnvironmentOf | undefined; concurrency: number },
): Promise<PreparedPrediction[]> {
  const unknown = predictions.filter((p) => !byId.has(p.instance_id)).map((p) => p.instance_id);
  if (unknown.length > 0) {
    const listed = unknown.slice(0, LISTED).join(', ') + (unknown.length > LISTED ? `, ... (${unknown.length} in all)` : '');
    // as the harness, which refuses such a run: a typo'd id must not pass as a run with nothing graded
    throw new MinisandboxError('NOT_FOUND', `${unknown.length} prediction(s) name instance ids the dataset lacks: ${listed}`, {
      hint: 'score predictions against the dataset they were made for, or select instances with --instances',
    });
  }
  // Like the harness: only predictions with a patch are graded.
  const todo = predictions.filter((p) => p.model_patch !== null && p.model_patch !== '');
  const graded = todo.map((prediction) => ({ prediction, instance: byId.get(prediction.instance_id)! }));
  const evalSpecs = await checkSpecs(
    graded.map((x) => x.instance),
    specs,
  );
  const envOf = opts.environmentOf;
  const environments = envOf === undefined ? [] : await checkEach(graded, opts.concurrency, (x) => envOf(x.instance));
  return graded.map((x, i) => {
    const spec = evalSpecs[i]!;
    return { ...x, spec, inputs: verdictInputs(x.instance, spec, x.prediction.model_patch, environments[i]) };
  });
}
