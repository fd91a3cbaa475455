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
    throw new InvalidInputError(
      `${where}: ${z.prettifyError(r.error)}`,
      'each prediction needs instance_id, model_patch (string or null) and model_name_or_path',
    );
  }
  return r.data;
}

/** Parses JSONL, a JSON list or a JSON object of predictions; later duplicates of an id win, as in the harness's dict. */
export function parsePredictions(text: string, source = 'predictions'): Prediction[] {
  const trimmed = text.trim();
  if (trimmed === '') return [];
  let values: unknown[];
  if (trimmed.startsWith('[') || (trimmed.startsWith('{') && !isJsonl(trimmed))) {
    let doc: unknown;
    try {
      doc = JSON.parse(trimmed);
    } catch (e) {
      throw new InvalidInputError(`${source}: not valid JSON (${(e as Error).message})`, 'give a JSON list, a JSON object keyed by instance id, or JSONL');
    }
    if (Array.isArray(doc)) values = doc;
    else if (doc !== null && typeof doc === 'object' && 'instance_id' in doc) values = [doc];
    else if (doc !== null && typeof doc === 'object') values = Object.values(doc);
    else throw new InvalidInputError(`${source}: expected predictions, got ${typeof doc}`, 'give a JSON list, a JSON object keyed by instance id, or JSONL');
  } else {
    values = [];
    const lines = text.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!.trim();
      if (line === '') continue;
      try {
        values.push(JSON.parse(line));
      } catch (e) {
        throw new InvalidInputError(`${source}:${i + 1}: not a JSON object (${(e as Error).message})`, 'JSONL wants one JSON object per line');
      }
    }
  }
  const byId = new Map<string, Prediction>();
  values.forEach((v, i) => {
    const p = parseOne(v, `${source}[${i}]`);
    byId.set(p.instance_id, p);
  });
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
