/**
 * Prediction files in SWE-bench's formats: JSONL (one object a line), a JSON list, or a JSON
 * object keyed by instance id. `model_patch: null` is a prediction without a patch.
 */
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';

export const PredictionSchema = z.looseObject({
  instance_id: z.string().min(1),
  model_patch: z.string().nullable(),
  model_name_or_path: z.string().default('None'),
});
export type Prediction = z.output<typeof PredictionSchema>;

function parseOne(value: unknown, where: string): Prediction {
  const r = PredictionSchema.safeParse(value);
  if (!r.success) {
    // one issue a field, named: a missing field is said as such, not as "expected string, received undefined"
    const issues = r.error.issues.map((i) => {
      const field = i.path.join('.');
      const missing = i.code === 'invalid_type' && field !== '' && lookup(value, i.path) === undefined;
      return field === '' ? i.message : missing ? `${field} is missing` : `${field}: ${i.message.replace(/^Invalid input: /, '')}`;
    });
    throw new InvalidInputError(`${where}: ${issues.join('; ')}`, 'each prediction needs instance_id, model_patch (string or null) and model_name_or_path');
  }
  return r.data;
}

function lookup(value: unknown, path: readonly PropertyKey[]): unknown {
  let v = value;
  for (const k of path) v = typeof v === 'object' && v !== null ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

/** An object whose values are not all objects is one prediction (maybe lacking its id), not a map of them. */
function isOnePrediction(doc: object): boolean {
  return 'instance_id' in doc || Object.values(doc).some((v) => typeof v !== 'object' || v === null || Array.isArray(v));
}

/** Parses JSONL, a JSON list or a JSON object of predictions; later duplicates of an id win, as in the harness's dict. */
export function parsePredictions(text: string, source = 'predictions'): Prediction[] {
  const trimmed = text.trim();
  if (trimmed === '') return [];
  /** Each value with where it came from: `file:LINE` for JSONL and a lone object, `file[i]`, `file.ID` otherwise. */
  let values: Array<{ value: unknown; where: string }>;
  if (trimmed.startsWith('[') || (trimmed.startsWith('{') && !isJsonl(trimmed))) {
    let doc: unknown;
    try {
      doc = JSON.parse(trimmed);
    } catch (e) {
      throw new InvalidInputError(`${source}: not valid JSON (${(e as Error).message})`, 'give a JSON list, a JSON object keyed by instance id, or JSONL');
    }
    const firstLine = text.slice(0, text.indexOf(trimmed)).split('\n').length;
    if (Array.isArray(doc)) values = doc.map((value, i) => ({ value, where: `${source}[${i}]` }));
    else if (doc !== null && typeof doc === 'object' && isOnePrediction(doc)) values = [{ value: doc, where: `${source}:${firstLine}` }];
    else if (doc !== null && typeof doc === 'object') values = Object.entries(doc).map(([id, value]) => ({ value, where: `${source}.${id}` }));
    else throw new InvalidInputError(`${source}: expected predictions, got ${typeof doc}`, 'give a JSON list, a JSON object keyed by instance id, or JSONL');
  } else {
    values = [];
    const lines = text.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!.trim();
      if (line === '') continue;
      try {
        values.push({ value: JSON.parse(line), where: `${source}:${i + 1}` });
      } catch (e) {
        throw new InvalidInputError(`${source}:${i + 1}: not a JSON object (${(e as Error).message})`, 'JSONL wants one JSON object per line');
      }
    }
  }
  const byId = new Map<string, Prediction>();
  for (const { value, where } of values) {
    const p = parseOne(value, where);
    byId.set(p.instance_id, p);
  }
  return [...byId.values()];
}

/** A JSON object on the first line that closes before the text ends means JSONL, not one object. */
function isJsonl(trimmed: string): boolean {
  const firstLine = trimmed.split('\n', 1)[0]!;
  if (firstLine.length === trimmed.length) return false;
  try {
    JSON.parse(firstLine);
    return true;
  } catch {
    return false;
  }
}
