import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { calcRunnerFactory, makeCalcRepo, type CalcRepo } from './fixtures/calc-repo.js';
import type { RunnerFactory } from './score-run.js';
import { validateInstances, validateResults, type ValidationObservation } from './validate.js';

const obs = (
  instance_id: string,
  kind: 'gold' | 'empty',
  run: number,
  resolved: boolean,
  f2p: [string[], string[]] = [[], []],
  status: 'completed' | 'timeout' = 'completed',
): ValidationObservation => ({
  instance_id,
  kind,
  run,
  result: {
    status,
    resolved,
    report:
      status === 'completed'
        ? {
            tests_status: {
              FAIL_TO_PASS: { success: f2p[0], failure: f2p[1] },
              PASS_TO_PASS: { success: [], failure: [] },
              FAIL_TO_FAIL: { success: [], failure: [] },
              PASS_TO_FAIL: { success: [], failure: [] },
            },
          }
        : {},
  },
});

describe('validation of gold and empty patches (pure)', () => {
  it('lists gold that does not resolve, empty that does, errors and flaky instances with the tests that changed', () => {
    const r = validateResults([
      obs('good', 'gold', 0, true),
      obs('good', 'empty', 0, false),
      obs('good', 'gold', 1, true),
      obs('good', 'empty', 1, false),
      obs('nogold', 'gold', 0, false),
      obs('nogold', 'empty', 0, false),
      obs('nogold', 'gold', 1, false),
      obs('nogold', 'empty', 1, false),
      obs('trivial', 'gold', 0, true),
      obs('trivial', 'empty', 0, true),
      obs('trivial', 'gold', 1, true),
      obs('trivial', 'empty', 1, true),
      obs('flaky', 'gold', 0, true, [['t1', 't2'], []]),
      obs('flaky', 'gold', 1, false, [['t1'], ['t2']]),
      obs('flaky', 'empty', 0, false),
      obs('flaky', 'empty', 1, false),
      obs('slow', 'gold', 0, true),
      obs('slow', 'gold', 1, false, undefined, 'timeout'),
      obs('slow', 'empty', 0, false),
      obs('slow', 'empty', 1, false),
    ]);
    expect(r.runs).toBe(2);
    expect(r.total_instances).toBe(5);
    expect(r.ok_ids).toEqual(['good']);
    expect(r.gold_unresolved_ids).toEqual(['flaky', 'nogold', 'slow']);
    expect(r.empty_resolved_ids).toEqual(['trivial']);
    expect(r.error_ids).toEqual(['slow']);
    expect(r.errors).toEqual([{ instance_id: 'slow', kind: 'gold', run: 1, status: 'timeout', error: '' }]);
    expect(r.flaky).toEqual([
      { instance_id: 'flaky', kind: 'gold', outcomes: ['resolved', 'unresolved'], tests: ['t2'] },
      { instance_id: 'slow', kind: 'gold', outcomes: ['resolved', 'timeout'], tests: [] },
    ]);
  });

  it('says for every run that went wrong why, with every failing test and its log', () => {
    const r = validateResults([
      { ...obs('nogold', 'gold', 0, false, [['t1'], ['t2', 't3']]), log: '/l/nogold/gold-run1.log' },
      obs('nogold', 'empty', 0, false),
      obs('trivial', 'gold', 0, true),
      obs('trivial', 'empty', 0, true),
      {
        ...obs('slow', 'gold', 0, false, undefined, 'timeout'),
        result: { status: 'timeout', resolved: false, error: 'the eval script ran past 1000 ms', report: {} },
      },
      obs('slow', 'empty', 0, false),
    ]);
    expect(r.failures).toEqual([
      {
        instance_id: 'nogold',
        kind: 'gold',
        run: 0,
        reason: expect.stringMatching(/^not resolved: 2 of 3 FAIL_TO_PASS fail/),
        failing_tests: ['t2', 't3'],
        log: '/l/nogold/gold-run1.log',
      },
      { instance_id: 'slow', kind: 'gold', run: 0, reason: 'timeout: the eval script ran past 1000 ms', failing_tests: [] },
      { instance_id: 'trivial', kind: 'empty', run: 0, reason: expect.stringMatching(/empty patch resolves/), failing_tests: [] },
    ]);
  });
});

describe('validating instances for real on the host', () => {
  let root: string;
  const repos = new Map<string, CalcRepo>();
  const factory: RunnerFactory = calcRunnerFactory(repos);
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'score-validate-'));
    for (const id of ['demo__ok-1', 'demo__nogold-1', 'demo__trivial-1']) repos.set(id, await makeCalcRepo(join(root, id), id));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('passes a good instance and lists a broken gold and a test list the empty patch already satisfies', async () => {
    const ok = repos.get('demo__ok-1')!;
    const nogold = repos.get('demo__nogold-1')!;
    const trivial = repos.get('demo__trivial-1')!;
    const rows = [
      ok.instance,
      { ...nogold.instance, FAIL_TO_PASS: [nogold.names.add, 'test_never_written (tests.test_calc.TestCalc.test_never_written)'] },
      { ...trivial.instance, FAIL_TO_PASS: '[]' },
    ];
    const logDir = join(root, 'logs');
    const report = await validateInstances(rows, (i) => repos.get(i.instance_id)!.spec, factory, {
      runs: 1,
      jobs: 2,
      timeoutS: 60,
      filesDir: (i) => join(root, 'files', i.instance_id),
      logDir,
    });
    expect(report).toMatchObject({
      runs: 1,
      total_instances: 3,
      ok_ids: ['demo__ok-1'],
      gold_unresolved_ids: ['demo__nogold-1'],
      empty_resolved_ids: ['demo__trivial-1'],
      error_ids: [],
      flaky: [],
    });
    const broken = report.failures.find((f) => f.instance_id === 'demo__nogold-1')!;
    expect(broken.failing_tests).toEqual(['test_never_written (tests.test_calc.TestCalc.test_never_written)']);
    expect(broken.log).toBe(join(logDir, 'demo__nogold-1', 'gold-run1.log'));
    expect(await readFile(broken.log!, 'utf8')).toContain('>>>>> Start Test Output');
  });
});
