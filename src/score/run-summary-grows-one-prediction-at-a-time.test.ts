/**
 * A run summary made one prediction at a time (the server's evaluate) is the summary `score` makes
 * of the same predictions at once, and concurrent additions to one file lose nothing.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRunSummary, RunSummarySchema, type ScoreResult } from './report.js';
import { recordInRunSummary, summaryWith } from './run-summary-update.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'run-summary-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

type Graded = Pick<ScoreResult, 'status' | 'resolved'>;
const DATASET = ['a-1', 'a-2', 'a-3', 'a-4', 'a-5', 'a-6'];
const STEPS: Array<[string, string | null, Graded | null]> = [
  ['a-1', 'p', { status: 'completed', resolved: true }],
  ['a-2', 'p', { status: 'completed', resolved: false }],
  ['a-3', '', null],
  ['a-4', 'p', { status: 'patch_apply_failed', resolved: false }],
  ['a-5', 'p', { status: 'timeout', resolved: false }],
  ['zz-unknown', 'p', { status: 'error', resolved: false }],
];

describe('run summary, one prediction at a time', () => {
  it("equals score's summary of the same predictions, and a regraded instance moves to its new list", () => {
    let s = null;
    for (const [id, patch, result] of STEPS) s = summaryWith(s, DATASET, id, patch, result);
    const whole = makeRunSummary({
      datasetIds: DATASET,
      predictions: new Map(STEPS.map(([id, patch]) => [id, { model_patch: patch }])),
      results: new Map(STEPS.flatMap(([id, , r]) => (r === null ? [] : [[id, r] as const]))),
    });
    expect(s).toEqual(whole);
    expect(s).toMatchObject({ resolved_ids: ['a-1'], unresolved_ids: ['a-2'], empty_patch_ids: ['a-3'], incomplete_ids: ['a-6'], unknown_ids: ['zz-unknown'] });
    const again = summaryWith(s, DATASET, 'a-2', 'p2', { status: 'completed', resolved: true });
    expect(again).toMatchObject({ resolved_ids: ['a-1', 'a-2'], unresolved_ids: [], resolved_instances: 2, submitted_instances: 6 });
    const emptied = summaryWith(again, DATASET, 'a-1', null, null);
    expect(emptied).toMatchObject({ resolved_ids: ['a-2'], empty_patch_ids: ['a-1', 'a-3'], completed_ids: ['a-2'] });
  });

  it('concurrent additions to one summary file keep every one', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => `c-${String(i).padStart(2, '0')}`);
    const path = join(dir, 'm.run.json');
    await Promise.all(ids.map((id, i) => recordInRunSummary(path, ids, id, 'p', { status: 'completed', resolved: i % 2 === 0 })));
    const s = RunSummarySchema.parse(JSON.parse(await readFile(path, 'utf8')));
    expect(s.submitted_ids).toEqual(ids);
    expect(s.resolved_ids).toEqual(ids.filter((_, i) => i % 2 === 0));
    expect(s.incomplete_ids).toEqual([]);
  });

  it('refuses to write over a file that is not a summary', async () => {
    const path = join(dir, 'other.json');
    await writeFile(path, '{"mine": true}\n');
    await expect(recordInRunSummary(path, ['x'], 'x', 'p', { status: 'completed', resolved: true })).rejects.toMatchObject({ code: 'INVALID_INPUT' });
    expect(await readFile(path, 'utf8')).toBe('{"mine": true}\n');
  });
});
