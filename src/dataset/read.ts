/**
 * Reading datasets: JSONL streamed line by line (a dataset can be large), or a `.json` file
 * holding an array of rows. Rows are SWE-bench's, or Multi-SWE-bench's and SWE-smith's, read as
 * SWE-bench's (row-formats.ts). Every error names the file and line (or array index).
 */
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { InvalidInputError, NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { parseWith } from '../recipe/structured.js';
import { DatasetRowSchema, type LocatedRow } from './row.js';
import { asSweBenchRow } from './row-formats.js';

const HINT =
  'each row needs instance_id, repo, base_commit and version (see recipes/demo/dataset.jsonl); ' +
  'Multi-SWE-bench rows org, repo, number, base.sha and fix_patch; SWE-smith rows instance_id, repo, base_commit, patch and image_name';

/** Streams validated rows; blank lines are skipped. */
export async function* readDataset(file: string): AsyncGenerator<LocatedRow> {
  if (file.endsWith('.json')) {
    yield* readJsonArray(file);
    return;
  }
  const stream = createReadStream(file, { encoding: 'utf8' });
  const opened = new Promise<void>((resolve, reject) => {
    stream.once('open', () => resolve());
    stream.once('error', reject);
  });
  try {
    await opened;
  } catch (e) {
    throw notFound(file, e);
  }
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line.trim() === '') continue;
    const where = `${file}:${n}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      throw new InvalidInputError(`${where}: not valid JSON (${(e as Error).message})`, 'a JSONL dataset holds one JSON object per line');
    }
    yield { row: parseWith(DatasetRowSchema, asSweBenchRow(value, where), where, HINT), where };
  }
}

async function* readJsonArray(file: string): AsyncGenerator<LocatedRow> {
  let value: unknown;
  try {
    value = JSON.parse(await readFile(file, 'utf8'));
  } catch (e) {
    if (e instanceof SyntaxError) throw new InvalidInputError(`${file}: not valid JSON (${e.message})`, 'a .json dataset holds an array of row objects');
    throw notFound(file, e);
  }
  if (!Array.isArray(value)) throw new InvalidInputError(`${file}: expected a JSON array of rows`, 'use .jsonl for one row per line');
  for (const [i, v] of value.entries()) {
    const where = `${file}[${i}]`;
    yield { row: parseWith(DatasetRowSchema, asSweBenchRow(v, where), where, HINT), where };
  }
}

function notFound(file: string, e: unknown): unknown {
  return isErrno(e, 'ENOENT') ? new NotFoundError(`dataset ${file}`, 'check the dataset path') : e;
}

/** All rows, rejecting duplicate instance ids (naming both places). */
export async function loadDataset(file: string): Promise<LocatedRow[]> {
  const rows: LocatedRow[] = [];
  const seen = new Map<string, string>();
  for await (const r of readDataset(file)) {
    const prev = seen.get(r.row.instance_id);
    if (prev !== undefined)
      throw new InvalidInputError(`${r.where}: duplicate instance_id ${r.row.instance_id} (first at ${prev})`, 'instance ids must be unique in a dataset');
    seen.set(r.row.instance_id, r.where);
    rows.push(r);
  }
  return rows;
}
