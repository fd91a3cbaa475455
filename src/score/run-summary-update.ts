/**
 * Adding one graded prediction to a run's summary (`<model>.<run_id>.json`), for graders that see
 * predictions one at a time (the server's evaluate) rather than a whole file (`score`). The
 * summary holds only id lists, so the predictions and results it stands for are read back from
 * them and the summary is made again by makeRunSummary: the same file `score` writes.
 *
 * Each read-modify-write of a summary holds its lock file (`<summary>.lock`) against other
 * processes (another server, a `score` run on the same reports dir), and callers in this process
 * queue for it first, so concurrent evaluations of one run lose no entry; each write is atomic (a
 * temporary file renamed over it), so a reader never sees half a file.
 */
import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';
import { withExclusiveLock } from '../store/lock.js';
import { isErrno } from '../util/fs.js';
import { makeRunSummary, type RunSummary, RunSummarySchema, type ScoreResult } from './report.js';
import { summaryLockPath, writeAtomic } from './score-run.js';

type Graded = Pick<ScoreResult, 'status' | 'resolved'>;

/** The summary with `instanceId` (re)graded: `patch` '' or null is an empty patch, `result` null for one. */
export function summaryWith(
  summary: RunSummary | null,
  datasetIds: readonly string[],
  instanceId: string,
  patch: string | null,
  result: Graded | null,
): RunSummary {
  const predictions = new Map<string, { model_patch: string | null }>();
  const results = new Map<string, Graded>();
  if (summary !== null) {
    const empty = new Set(summary.empty_patch_ids);
    const resolved = new Set(summary.resolved_ids);
    const applyFailed = new Set(summary.patch_apply_failed_ids);
    const timeout = new Set(summary.timeout_ids);
    for (const id of summary.submitted_ids) predictions.set(id, { model_patch: empty.has(id) ? '' : 'patch' });
    for (const id of summary.completed_ids) results.set(id, { status: 'completed', resolved: resolved.has(id) });
    for (const id of summary.error_ids)
      results.set(id, { status: applyFailed.has(id) ? 'patch_apply_failed' : timeout.has(id) ? 'timeout' : 'error', resolved: false });
  }
  predictions.set(instanceId, { model_patch: patch });
  if (result === null) results.delete(instanceId);
  else results.set(instanceId, result);
  // instances the earlier summary counted (a run over more of the dataset) stay counted
  const ids = new Set([
    ...datasetIds,
    ...(summary === null ? [] : [...summary.completed_ids, ...summary.incomplete_ids, ...summary.empty_patch_ids, ...summary.error_ids]),
  ]);
  return makeRunSummary({ datasetIds: [...ids], predictions, results });
}

const queues = new Map<string, Promise<unknown>>();

/** Runs `fn` after every earlier call for the same `key` has settled. */
async function serialized<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const prev = queues.get(key) ?? Promise.resolve();
  const next = prev.then(fn, fn);
  const tail = next.catch(() => undefined);
  queues.set(key, tail);
  try {
    return await next;
  } finally {
    if (queues.get(key) === tail) queues.delete(key);
  }
}

async function readSummary(path: string): Promise<RunSummary | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return null;
    throw e;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const r = RunSummarySchema.safeParse(parsed);
  // never write over a file that is not a summary: it may be someone's other data
  if (!r.success)
    throw new InvalidInputError(
      `${path} is not a run summary${parsed === undefined ? ' (not JSON)' : `: ${z.prettifyError(r.error)}`}`,
      'use another run id, or move the file away',
    );
  return r.data;
}

/** Records one instance's outcome in the summary at `path` (made when missing); returns the new summary. */
export async function recordInRunSummary(
  path: string,
  datasetIds: readonly string[],
  instanceId: string,
  patch: string | null,
  result: Graded | null,
): Promise<RunSummary> {
  return serialized(path, async () => {
    await mkdir(dirname(path), { recursive: true });
    return withExclusiveLock(summaryLockPath(path), async () => {
      const summary = summaryWith(await readSummary(path), datasetIds, instanceId, patch, result);
      await writeAtomic(path, `${JSON.stringify(summary, null, 4)}\n`);
      return summary;
    });
  });
}
