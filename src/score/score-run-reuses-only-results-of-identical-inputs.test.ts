/**
 * A rerun of a run id reuses an instance's earlier result only when everything that decided its
 * verdict is the same: the dataset row (tests, test patch, base commit), the eval spec, the
 * environment and the patch. Each result.json records their digests; a change regrades the
 * instance and the outcome says what changed. Graded for real on the host (calc repositories).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { calcRunnerFactory, makeCalcRepo, type CalcRepo } from './fixtures/calc-repo.js';
import type { Prediction } from './predictions.js';
import { ScoreResultSchema } from './report.js';
import { type RunnerFactory, scoreRun, type ScoreRunOptions } from './score-run.js';
import type { EvalSpecInput } from './spec.js';

let root: string;
const repos = new Map<string, CalcRepo>();
const factory = calcRunnerFactory(repos);
const ENV_A = `sha256:${'a'.repeat(64)}`;
const ENV_B = `sha256:${'b'.repeat(64)}`;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'score-reuse-'));
  for (const id of ['demo__calc-1', 'demo__calc-2']) repos.set(id, await makeCalcRepo(join(root, id), id));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('a rerun of a run id', () => {
  it('reuses a result only for identical row, spec, environment and patch, and says what changed when it regrades', async () => {
    const reportDir = join(root, 'reports');
    const wrong = repos.get('demo__calc-2')!.gold.replace('a + b', 'a * b');
    expect(wrong).not.toBe(repos.get('demo__calc-2')!.gold);
    let rows = [...repos.values()].map((r) => r.instance);
    let predictions: Prediction[] = [
      { instance_id: 'demo__calc-1', model_patch: repos.get('demo__calc-1')!.gold, model_name_or_path: 'm' },
      { instance_id: 'demo__calc-2', model_patch: wrong, model_name_or_path: 'm' },
    ];
    let spec = (i: { instance_id: string }): EvalSpecInput => repos.get(i.instance_id)!.spec;
    let env = (_i: { instance_id: string }) => ENV_A;
    const graded: string[] = [];
    const counting: RunnerFactory = (x) => {
      graded.push(x.instance_id);
      return factory(x);
    };
    const run = async (extra: Partial<ScoreRunOptions> = {}) => {
      graded.length = 0;
      const out = await scoreRun(rows, predictions, spec, counting, {
        jobs: 2,
        runId: 'r1',
        reportDir,
        timeoutS: 120,
        filesDir: (i) => join(root, 'files', i.instance_id),
        environmentOf: env,
        ...extra,
      });
      return { ...out, graded: graded.sort() };
    };

    const first = await run();
    expect(first.graded).toEqual(['demo__calc-1', 'demo__calc-2']);
    expect(first.summary.resolved_ids).toEqual(['demo__calc-1']);
    expect(first.summary.unresolved_ids).toEqual(['demo__calc-2']);
    // what decided the verdict is stored with it
    const stored = ScoreResultSchema.parse(JSON.parse(await readFile(join(reportDir, 'r1', 'm', 'demo__calc-1', 'result.json'), 'utf8')));
    expect(Object.keys(stored.inputs ?? {}).sort()).toEqual(['environment', 'patch', 'row', 'spec']);
    expect(stored.inputs?.environment).toBe(ENV_A);

    const same = await run();
    expect(same.graded).toEqual([]);
    expect(same.reused).toEqual(['demo__calc-1', 'demo__calc-2']);
    expect(same.regraded).toEqual([]);

    // a field of the row scoring does not read (the problem statement) changes nothing
    rows = rows.map((r) => ({ ...r, problem_statement: 'reworded' }));
    expect((await run()).graded).toEqual([]);

    // the spec: both instances use it
    const oldSpec = spec;
    spec = (i) => ({ ...oldSpec(i), preCommands: ['export CALC_RUN=2'] });
    const specChanged = await run();
    expect(specChanged.graded).toEqual(['demo__calc-1', 'demo__calc-2']);
    expect(specChanged.regraded).toEqual([
      { instance_id: 'demo__calc-1', changed: ['spec'], reason: 'spec changed' },
      { instance_id: 'demo__calc-2', changed: ['spec'], reason: 'spec changed' },
    ]);
    expect(specChanged.reused).toEqual([]);

    // the patch of one instance: the other is reused
    predictions = predictions.map((p) => (p.instance_id === 'demo__calc-2' ? { ...p, model_patch: repos.get('demo__calc-2')!.gold } : p));
    const patchChanged = await run();
    expect(patchChanged.graded).toEqual(['demo__calc-2']);
    expect(patchChanged.regraded).toEqual([{ instance_id: 'demo__calc-2', changed: ['patch'], reason: 'patch changed' }]);
    expect(patchChanged.reused).toEqual(['demo__calc-1']);
    expect(patchChanged.summary.resolved_ids).toEqual(['demo__calc-1', 'demo__calc-2']);

    // the environment one instance is graded in
    env = (i) => (i.instance_id === 'demo__calc-1' ? ENV_B : ENV_A);
    const envChanged = await run();
    expect(envChanged.regraded).toEqual([{ instance_id: 'demo__calc-1', changed: ['environment'], reason: 'environment changed' }]);

    // the row: a test list the verdict is judged by
    rows = rows.map((r) => (r.instance_id === 'demo__calc-2' ? { ...r, FAIL_TO_PASS: [...JSON.parse(String(r.FAIL_TO_PASS)), 'test_gone (x.Y)'] } : r));
    const rowChanged = await run();
    expect(rowChanged.regraded).toEqual([{ instance_id: 'demo__calc-2', changed: ['row'], reason: 'row changed' }]);
    expect(rowChanged.summary.unresolved_ids).toEqual(['demo__calc-2']);

    // a result written before inputs were recorded is not trusted
    const path = join(reportDir, 'r1', 'm', 'demo__calc-1', 'result.json');
    const { inputs: _inputs, ...old } = ScoreResultSchema.parse(JSON.parse(await readFile(path, 'utf8')));
    await writeFile(path, JSON.stringify(old));
    const unrecorded = await run();
    expect(unrecorded.regraded).toEqual([{ instance_id: 'demo__calc-1', changed: [], reason: 'its earlier result does not record its inputs' }]);
    expect((await run()).graded).toEqual([]);
  });
});
