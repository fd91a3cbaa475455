import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { calcRunnerFactory, makeCalcRepo, type CalcRepo } from './fixtures/calc-repo.js';
import type { Prediction } from './predictions.js';
import { ReportFileSchema, RunSummarySchema, ScoreResultSchema } from './report.js';
import { NotFoundError } from '../errors.js';
import { scoreRun, type RunnerFactory } from './score-run.js';

let root: string;
const repos = new Map<string, CalcRepo>();

const factory: RunnerFactory = calcRunnerFactory(repos);

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'score-run-'));
  for (const id of ['demo__calc-1', 'demo__calc-2', 'demo__calc-3', 'demo__calc-4']) repos.set(id, await makeCalcRepo(join(root, id), id));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('scoring a run of predictions', () => {
  it('grades each instance, records empty and failing ones, writes harness-shaped reports and resumes', async () => {
    const rows = [...repos.values()].map((r) => r.instance);
    const model = 'org/model-x';
    const pred = (id: string, patch: string | null): Prediction => ({ instance_id: id, model_patch: patch, model_name_or_path: model });
    const predictions = [
      pred('demo__calc-1', repos.get('demo__calc-1')!.gold),
      pred('demo__calc-2', 'diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n'),
      pred('demo__calc-3', ''),
      pred('demo__calc-4', repos.get('demo__calc-4')!.gold),
    ];
    const specs = (i: { instance_id: string }) => repos.get(i.instance_id)!.spec;
    // demo__calc-4's environment cannot be made this time: that instance errors, the run goes on.
    const flaky: RunnerFactory = (i) => {
      if (i.instance_id === 'demo__calc-4') throw new Error('no sandbox for demo__calc-4 today');
      return factory(i);
    };
    const reportDir = join(root, 'reports');
    const seen: string[] = [];
    const out = await scoreRun(rows, predictions, specs, flaky, {
      jobs: 2,
      runId: 'r1',
      reportDir,
      timeoutS: 60,
      filesDir: (i) => join(root, 'files', i.instance_id),
      onResult: (r) => seen.push(r.instance_id),
    });

    expect(out.summary).toMatchObject({
      total_instances: 4,
      submitted_instances: 4,
      completed_instances: 1,
      resolved_instances: 1,
      unresolved_instances: 0,
      empty_patch_instances: 1,
      error_instances: 2,
      resolved_ids: ['demo__calc-1'],
      empty_patch_ids: ['demo__calc-3'],
      error_ids: ['demo__calc-2', 'demo__calc-4'],
      patch_apply_failed_ids: ['demo__calc-2'],
      unknown_ids: [],
      incomplete_ids: [],
    });
    expect(seen.sort()).toEqual(['demo__calc-1', 'demo__calc-2', 'demo__calc-4']);
    expect(out.summaryPath).toBe(join(reportDir, 'org__model-x.r1.json'));
    expect(RunSummarySchema.parse(JSON.parse(await readFile(out.summaryPath, 'utf8')))).toEqual(out.summary);

    const dir = join(reportDir, 'r1', 'org__model-x', 'demo__calc-1');
    const report = ReportFileSchema.parse(JSON.parse(await readFile(join(dir, 'report.json'), 'utf8')));
    expect(report['demo__calc-1']).toMatchObject({ patch_is_None: false, patch_exists: true, patch_successfully_applied: true, resolved: true });
    expect(await readFile(join(dir, 'test_output.txt'), 'utf8')).toContain('>>>>> End Test Output');
    expect(await readFile(join(dir, 'eval.sh'), 'utf8')).toMatch(/^#!\/bin\/bash\nset -uxo pipefail\n/);
    const failed = ScoreResultSchema.parse(JSON.parse(await readFile(join(reportDir, 'r1', 'org__model-x', 'demo__calc-2', 'result.json'), 'utf8')));
    expect(failed.status).toBe('patch_apply_failed');
    expect(existsSync(join(reportDir, 'r1', 'org__model-x', 'demo__calc-4', 'error.txt'))).toBe(true);
    expect(out.results.find((r) => r.instance_id === 'demo__calc-4')?.error).toMatch(/no sandbox for demo__calc-4/);

    // A second attempt of the same run reuses graded results and retries only the errored instance
    // (which errors again here: its environment fails once more).
    const again: string[] = [];
    const factory2: RunnerFactory = (instance) => {
      again.push(instance.instance_id);
      return flaky(instance);
    };
    const out2 = await scoreRun(rows, predictions, specs, factory2, {
      jobs: 2,
      runId: 'r1',
      reportDir,
      timeoutS: 60,
      filesDir: (i) => join(root, 'files', i.instance_id),
    });
    expect(again).toEqual(['demo__calc-4']);
    expect(out2.summary).toEqual(out.summary);
    expect(out.reused).toEqual([]);
    expect(out2.reused).toEqual(['demo__calc-1', 'demo__calc-2']);
    // Every instance not resolved says why, with its log.
    expect(out2.failures.map((f) => [f.instance_id, f.reason.split(':')[0], f.log])).toEqual([
      ['demo__calc-2', 'patch apply failed', join(reportDir, 'r1', 'org__model-x', 'demo__calc-2', 'test_output.txt')],
      ['demo__calc-4', 'error', join(reportDir, 'r1', 'org__model-x', 'demo__calc-4', 'error.txt')],
    ]);

    // force: every instance runs again
    again.length = 0;
    const out3 = await scoreRun(rows, predictions, specs, factory2, {
      jobs: 2,
      runId: 'r1',
      reportDir,
      timeoutS: 60,
      force: true,
      filesDir: (i) => join(root, 'files', i.instance_id),
    });
    expect(again.sort()).toEqual(['demo__calc-1', 'demo__calc-2', 'demo__calc-4']);
    expect(out3.reused).toEqual([]);
  });

  it('refuses, before grading anything, predictions of unknown instances, a spec with an unknown parser and an environment that does not resolve', async () => {
    const rows = [...repos.values()].map((r) => r.instance);
    const gold = (id: string): Prediction => ({ instance_id: id, model_patch: repos.get(id)?.gold ?? 'x', model_name_or_path: 'org/refused' });
    const specs = (i: { instance_id: string }) => repos.get(i.instance_id)!.spec;
    const reportDir = join(root, 'reports-refused');
    const graded: string[] = [];
    const counting: RunnerFactory = (i) => {
      graded.push(i.instance_id);
      return factory(i);
    };
    const opts = { jobs: 1, runId: 'r1', reportDir, timeoutS: 60 };
    await expect(scoreRun(rows, [gold('demo__calc-1'), gold('not__in-dataset-1'), gold('not__in-dataset-2')], specs, counting, opts)).rejects.toMatchObject({
      code: 'NOT_FOUND',
      message: expect.stringMatching(/2 prediction\(s\) name instance ids the dataset lacks: not__in-dataset-1, not__in-dataset-2/),
    });
    const badParser = (i: { instance_id: string }) => ({ ...specs(i), ...(i.instance_id === 'demo__calc-4' ? { parser: 'nosuch' } : {}) });
    await expect(scoreRun(rows, [gold('demo__calc-1'), gold('demo__calc-4')], badParser, counting, opts)).rejects.toMatchObject({
      code: 'INVALID_INPUT',
      message: expect.stringMatching(/unknown log parser "nosuch"/),
    });
    const environmentOf = (i: { instance_id: string }) => {
      if (i.instance_id !== 'demo__calc-1') throw new NotFoundError(`ref demo/${i.instance_id}`);
      return `sha256:${'1'.repeat(64)}`;
    };
    const noEnv = scoreRun(rows, [gold('demo__calc-1'), gold('demo__calc-2'), gold('demo__calc-3')], specs, counting, { ...opts, environmentOf });
    await expect(noEnv).rejects.toMatchObject({
      code: 'NOT_FOUND',
      message: expect.stringMatching(/^ref demo\/demo__calc-2 not found\nref demo\/demo__calc-3 not found$/),
    });
    expect(graded).toEqual([]);
    expect(existsSync(reportDir)).toBe(false);
  });

  it('refuses a run id that would escape the report directory', async () => {
    await expect(
      scoreRun([], [], () => ({ testCmd: 'true', parser: 'pytest' }), factory, { jobs: 1, runId: '../x', reportDir: root, timeoutS: 1 }),
    ).rejects.toThrow(/run id/);
  });

  it('stops when its signal fires: the run rejects with ABORTED, writes no result for the cancelled instance, and a rerun grades it', async () => {
    const rows = [...repos.values()].map((r) => r.instance);
    const id = 'demo__calc-1';
    const predictions: Prediction[] = [{ instance_id: id, model_patch: repos.get(id)!.gold, model_name_or_path: 'org/cancelled' }];
    const specs = (i: { instance_id: string }) => repos.get(i.instance_id)!.spec;
    const reportDir = join(root, 'reports-abort');
    const abort = new AbortController();
    // a runner that is still working when the signal fires, and stops because of it
    const hanging: RunnerFactory =
      () =>
      (_files, _script, { signal }) =>
        new Promise((resolve) => {
          signal?.addEventListener('abort', () => resolve({ output: '', status: 'killed', exitCode: null, truncated: false }), { once: true });
          abort.abort(new Error('the trainer moved on'));
        });
    await expect(scoreRun(rows, predictions, specs, hanging, { jobs: 1, runId: 'r1', reportDir, timeoutS: 60, signal: abort.signal })).rejects.toMatchObject({
      code: 'ABORTED',
    });
    expect(existsSync(join(reportDir, 'r1', 'org__cancelled', id, 'result.json'))).toBe(false);
    const again = await scoreRun(rows, predictions, specs, factory, {
      jobs: 1,
      runId: 'r1',
      reportDir,
      timeoutS: 60,
      filesDir: (i) => join(root, 'files', i.instance_id),
    });
    expect(again.summary.resolved_ids).toEqual([id]);
  });
});
