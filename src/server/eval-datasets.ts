/**
 * The datasets the server grades against (`serve --eval-dataset`): each one's rows (the instance's
 * tests, test patch and base commit) and specs (test command, log parser, preTest), read once at
 * start so that a bad file stops the server instead of failing every evaluate. Its environments
 * are the registry's `<name>/<instance_id>` tags, as `build` and `score` name them.
 */
import { datasetNameFromFile } from '../builder/plan.js';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs, lookupSpec } from '../dataset/specs.js';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { evalSpecFromDataset } from '../score/dataset-spec.js';
import { parseScoreInstance, type ScoreInstance } from '../score/instance.js';
import type { EvalSpecInput } from '../score/spec.js';

export interface EvalDatasetSource {
  /** Default: from the rows file's name, as `build` and `score` name a dataset. */
  name?: string;
  rows: string;
  specs: string;
}

export interface EvalInstance {
  instance: ScoreInstance;
  spec: EvalSpecInput;
  /** The environment to grade in. */
  ref: string;
}

export interface EvalDataset {
  name: string;
  /** Every instance id, in file order (a run summary's total). */
  ids: string[];
  get(instanceId: string): EvalInstance | undefined;
}

/** `[NAME=]ROWS,SPECS` (the CLI's form). */
export function parseEvalDatasetOption(text: string): EvalDatasetSource {
  const m = /^(?:([^=,]+)=)?([^,]+),([^,]+)$/.exec(text);
  if (m === null) throw new InvalidInputError(`--eval-dataset ${text}: not [NAME=]ROWS,SPECS`, 'e.g. --eval-dataset lite=swe-bench-lite.jsonl,specs.yaml');
  return { ...(m[1] === undefined ? {} : { name: m[1] }), rows: m[2]!, specs: m[3]! };
}

export async function loadEvalDataset(src: EvalDatasetSource): Promise<EvalDataset> {
  const name = src.name ?? datasetNameFromFile(src.rows);
  const [rows, specs] = await Promise.all([loadDataset(src.rows), loadSpecs(src.specs)]);
  const byId = new Map<string, EvalInstance>();
  for (const r of rows) {
    const instance = parseScoreInstance(r.row, r.where);
    // every row's spec is looked up now: a row no spec covers is found at start
    const spec = evalSpecFromDataset(lookupSpec(specs, instance.repo, instance.version, r.where));
    byId.set(instance.instance_id, { instance, spec, ref: `${name}/${instance.instance_id}` });
  }
  return { name, ids: [...byId.keys()], get: (id) => byId.get(id) };
}

export async function loadEvalDatasets(srcs: readonly EvalDatasetSource[]): Promise<Map<string, EvalDataset>> {
  const out = new Map<string, EvalDataset>();
  for (const d of await Promise.all(srcs.map(loadEvalDataset))) {
    if (out.has(d.name)) throw new InvalidInputError(`two evaluate datasets are named ${d.name}`, 'name one of them: --eval-dataset NAME=ROWS,SPECS');
    out.set(d.name, d);
  }
  return out;
}

export function findEvalInstance(datasets: ReadonlyMap<string, EvalDataset>, dataset: string, instanceId: string): { ds: EvalDataset; it: EvalInstance } {
  // not a missing dataset but a server that grades none: no request can succeed here
  if (datasets.size === 0)
    throw new MinisandboxError('NOT_CONFIGURED', 'this server grades no dataset (it was started without --eval-dataset)', {
      hint: 'start serve with --eval-dataset [NAME=]ROWS,SPECS',
    });
  const ds = datasets.get(dataset);
  if (ds === undefined) throw new NotFoundError(`dataset ${JSON.stringify(dataset)}`, `this server grades: ${[...datasets.keys()].join(', ')}`);
  const it = ds.get(instanceId);
  if (it === undefined) throw new NotFoundError(`instance ${JSON.stringify(instanceId)} in dataset ${dataset}`, 'use an instance_id from the dataset rows');
  return { ds, it };
}
