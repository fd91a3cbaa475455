/**
 * Picking instances of a dataset, as the SWE-bench harness's `--instance_ids`: a list of ids
 * (`--instances a,b`), a file of ids (`--instances-file F`: one per line or comma-separated; `#`
 * starts a comment), or a regular expression over ids (`--instances '/^django__/'` or
 * `--instances-regex RE`). An id the dataset does not have is an error, never a silent skip: a
 * typo would otherwise grade or build nothing and report success.
 */
import { readFile } from 'node:fs/promises';
import { InvalidInputError, NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';

export interface InstanceSelection {
  /** Exact ids; every one must be in the dataset. */
  ids: string[];
  /** Ids matching any of these are selected too; each must match at least one. */
  patterns: RegExp[];
}

export interface SelectionOptions {
  instances?: string | undefined;
  instancesFile?: string | undefined;
  instancesRegex?: string | undefined;
}

function compile(source: string, flag: string): RegExp {
  try {
    return new RegExp(source);
  } catch (e) {
    throw new InvalidInputError(
      `${flag}: invalid regular expression ${JSON.stringify(source)}: ${(e as Error).message}`,
      'write a JavaScript regular expression, e.g. --instances-regex "^django__django-1[0-9]+$"',
    );
  }
}

/** Splits a list of ids: commas, whitespace and newlines separate; `#` to the end of a line is a comment. */
export function splitIds(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.replace(/#.*$/, ''))
    .flatMap((l) => l.split(/[,\s]+/))
    .filter((s) => s !== '');
}

/** Pure: the selection that `--instances` (`ID[,ID...]` or `/regex/`) and `--instances-regex` ask for. */
export function parseSelection(
  o: { instances?: string | undefined; instancesRegex?: string | undefined },
  fileIds: readonly string[] = [],
): InstanceSelection | null {
  const ids: string[] = [...fileIds];
  const patterns: RegExp[] = [];
  if (o.instances !== undefined) {
    const m = /^\/(.*)\/$/s.exec(o.instances.trim());
    if (m) patterns.push(compile(m[1]!, '--instances'));
    else {
      const listed = splitIds(o.instances);
      if (listed.length === 0) throw new InvalidInputError('--instances names no instance', 'give ids separated by commas, or /regex/');
      ids.push(...listed);
    }
  }
  if (o.instancesRegex !== undefined) patterns.push(compile(o.instancesRegex, '--instances-regex'));
  return ids.length === 0 && patterns.length === 0 && o.instances === undefined ? null : { ids, patterns };
}

/** Reads `--instances-file` and parses the options; null when no selection was asked for. */
export async function loadSelection(o: SelectionOptions): Promise<InstanceSelection | null> {
  let fileIds: string[] = [];
  if (o.instancesFile !== undefined) {
    let text: string;
    try {
      text = await readFile(o.instancesFile, 'utf8');
    } catch (e) {
      if (isErrno(e, 'ENOENT')) throw new NotFoundError(`instances file ${o.instancesFile}`, 'give a file of instance ids, one per line');
      throw e;
    }
    fileIds = splitIds(text);
    if (fileIds.length === 0) throw new InvalidInputError(`instances file ${o.instancesFile} names no instance`, 'one instance id per line');
  }
  const sel = parseSelection(o, fileIds);
  return sel ?? (o.instancesFile !== undefined ? { ids: fileIds, patterns: [] } : null);
}

/**
 * Pure: the items whose id the selection names, in their dataset order. Throws NotFoundError
 * (exit 3) listing every id the dataset lacks and every pattern that matches nothing.
 */
export function selectInstances<T>(items: readonly T[], sel: InstanceSelection | null, idOf: (t: T) => string): T[] {
  if (sel === null) return [...items];
  const have = new Set(items.map(idOf));
  const unknown = [...new Set(sel.ids)].filter((id) => !have.has(id));
  const idle = sel.patterns.filter((p) => !items.some((t) => p.test(idOf(t))));
  if (unknown.length > 0 || idle.length > 0) {
    const what = [
      unknown.length > 0 ? `instance(s) ${unknown.slice(0, 10).join(', ')}${unknown.length > 10 ? ` and ${unknown.length - 10} more` : ''}` : '',
      idle.length > 0 ? `any instance matching ${idle.map((p) => `/${p.source}/`).join(', ')}` : '',
    ]
      .filter((s) => s !== '')
      .join(' and ');
    throw new NotFoundError(`${what} in the dataset`, 'check the ids against the dataset (instance_id), or drop --instances to take every instance');
  }
  const wanted = new Set(sel.ids);
  return items.filter((t) => wanted.has(idOf(t)) || sel.patterns.some((p) => p.test(idOf(t))));
}
