/**
 * Reading YAML or JSON input files (recipes, specs) into plain values, and turning zod issues into
 * messages that name the file and the field path, e.g. `recipes/demo/env.yaml: commands[2]: expected string`.
 */
import { readFile } from 'node:fs/promises';
import type { z } from 'zod';
import { InvalidInputError, NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';

/**
 * Parses YAML (JSON is YAML too). Numbers and map keys keep their source text: an unquoted `1.0`
 * (a SWE-bench version, an env value) would otherwise become the number 1 and then "1", and
 * `mode: 0644` the decimal 644. No input format here wants a YAML number; schemas parse strings.
 */
export async function parseStructured(text: string, file: string): Promise<unknown> {
  // Loaded on first use: yaml costs ~50 ms of every CLI start, and only builds read YAML.
  const { isMap, isScalar, parseDocument, visit } = await import('yaml');
  // merge keys (`<<: *django`): hand-written specs for many versions share entries that way
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true, merge: true });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    const where = e.linePos?.[0] ? `:${e.linePos[0].line}:${e.linePos[0].col}` : '';
    throw new InvalidInputError(`${file}${where}: ${e.message.split('\n')[0]}`, 'fix the YAML/JSON syntax at that position');
  }
  visit(doc, {
    Scalar(_, node) {
      if (typeof node.value === 'number' && typeof node.source === 'string') node.value = node.source;
    },
    Map(_, node) {
      if (!isMap(node)) return;
      for (const pair of node.items) {
        if (isScalar(pair.key) && typeof pair.key.value !== 'string' && typeof pair.key.source === 'string') {
          pair.key.value = pair.key.source;
        }
      }
    },
  });
  return doc.toJS({ maxAliasCount: 100 });
}

export async function readStructuredFile(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if (isErrno(e, 'ENOENT'))
      throw new NotFoundError(`file ${file}`, 'check the path (relative paths resolve against the current directory or the referring file)');
    throw e;
  }
  return parseStructured(text, file);
}

/** `commands[2]`, `from.suite`, `repos["demo/calc"]["1.0"].env` */
export function formatFieldPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else if (typeof p === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(p)) out += out === '' ? p : `.${p}`;
    else out += `[${JSON.stringify(String(p))}]`;
  }
  return out === '' ? '(top level)' : out;
}

export function formatIssue(issue: z.core.$ZodIssue): string {
  const { path, message } = unionCause(issue);
  return `${formatFieldPath(path)}: ${message.replace(/^Invalid input: /, '')}`;
}

/**
 * What a union's "Invalid input" means: the branch whose type matched and what it said (a size
 * string that is not a size), or, where no type matched, every type it takes ("expected array or
 * string, received number", for `FAIL_TO_PASS: 42`).
 */
export function unionCause(issue: z.core.$ZodIssue): { path: ReadonlyArray<PropertyKey>; message: string } {
  if (issue.code !== 'invalid_union' || issue.errors.length === 0) return { path: issue.path, message: issue.message };
  const firsts = issue.errors.map((branch) => branch[0]).filter((i): i is z.core.$ZodIssue => i !== undefined);
  const typeOnly = firsts.every((i) => i.code === 'invalid_type' && i.path.length === 0);
  if (typeOnly) {
    const expected = [...new Set(firsts.map((i) => (i as z.core.$ZodIssueInvalidType).expected))];
    const received = /received (\w+)/.exec(firsts[0]?.message ?? '')?.[1];
    return { path: issue.path, message: `expected ${expected.join(' or ')}${received === undefined ? '' : `, received ${received}`}` };
  }
  const matched = firsts.find((i) => !(i.code === 'invalid_type' && i.path.length === 0)) ?? firsts[0]!;
  const inner = unionCause(matched);
  return { path: [...issue.path, ...inner.path], message: inner.message };
}

/** Validates `value` against `schema`; on failure throws naming `where` (file, or file:line) and every bad field. */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown, where: string, hint?: string): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issues = r.error.issues.slice(0, 5).map(formatIssue);
  const more = r.error.issues.length > 5 ? `; and ${r.error.issues.length - 5} more` : '';
  throw new InvalidInputError(`${where}: ${issues.join('; ')}${more}`, hint);
}
