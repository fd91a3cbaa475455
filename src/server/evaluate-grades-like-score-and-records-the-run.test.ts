/**
 * POST /v1/evaluate over real HTTP against a real dataset: SWE-bench-like eval images (Debian, git,
 * the repository in /testbed, an env that preTest activates) imported into a temporary registry as
 * `data/<instance_id>`, each evaluation graded in a fresh sandbox, and runs recorded where `score`
 * records them.
 */
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeWorkDir } from '../../test/helpers/images.js';
import { type SwebenchLikeImages, swebenchLikeImages, writeShlibSpecs } from '../../test/helpers/swebench-like-images.js';
import { importDatasetImages } from '../image/dataset-images.js';
import { LocalRegistry } from '../registry/local.js';
import { ReportFileSchema, RunSummarySchema, ScoreResultSchema } from '../score/report.js';
import { StorePaths } from '../store/paths.js';
import { buildApp } from './app.js';
import { type RunningServer, startServer } from './serve.js';

const work = mkdtempSync(join(tmpdir(), 'ms-serve-eval-'));
chmodSync(work, 0o755); // the sandboxes' subordinate ids must reach the store below it
const reportsDir = join(work, 'reports');
let images: SwebenchLikeImages;
let srv: RunningServer;
let token: string;

beforeAll(async () => {
  images = await swebenchLikeImages();
  const reg = new LocalRegistry(join(work, 'registry'));
  const store = new StorePaths(join(work, 'store'));
  const items = images.rows.map((r) => ({
    instanceId: r.instance_id,
    source: `oci:${images.layout}:${images.tagFor(r.instance_id)}`,
    tag: `data/${r.instance_id}`,
  }));
  const imported = await importDatasetImages(reg, store, items);
  expect(imported.map((r) => r.status)).toEqual(['built', 'built']);
  writeFileSync(join(work, 'data.jsonl'), `${images.rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  writeShlibSpecs(join(work, 'specs.yaml'), images, { image: `oci:${images.layout}:sweb.eval.x86_64.{id}` });
  srv = await startServer(
    reg,
    store,
    {
      listen: { host: '127.0.0.1', port: 0 },
      tokenFile: join(work, 'token'),
      maxSandboxes: 8,
      idleTimeoutMs: 600_000,
      ttlMs: 3_600_000,
      evalDatasets: [{ rows: join(work, 'data.jsonl'), specs: join(work, 'specs.yaml') }],
      reportsDir,
    },
    () => undefined,
  );
  token = readFileSync(join(work, 'token'), 'utf8').trim();
}, 900_000);

afterAll(async () => {
  await srv?.close();
  removeWorkDir(work);
});

async function evaluate(body: unknown): Promise<{ status: number; json: Record<string, unknown>; scoreStatus: string | null }> {
  const r = await fetch(`${srv.url}/v1/evaluate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: (await r.json()) as Record<string, unknown>, scoreStatus: r.headers.get('x-minisandbox-score-status') };
}

const gold = (id: string): string => images.rows.find((r) => r.instance_id === id)!.patch;
const SHLIB1_TESTS = {
  FAIL_TO_PASS: { success: ['tests/test_lib.sh::test_max_second'], failure: [] },
  PASS_TO_PASS: { success: ['tests/test_lib.sh::test_add', 'tests/test_lib.sh::test_max_first', 'tests/test_lib.sh::test_abs_positive'], failure: [] },
  FAIL_TO_FAIL: { success: [], failure: [] },
  PASS_TO_FAIL: { success: [], failure: [] },
};

describe('POST /v1/evaluate', () => {
  it('grades the gold patch resolved and an empty one not, in the report.json shape, and records both in the run as score does', async () => {
    const g = await evaluate({ dataset: 'data', instance_id: 'test__shlib-1', patch: gold('test__shlib-1'), model: 'org/m', run_id: 'r1' });
    expect(g.status, JSON.stringify(g.json)).toBe(200);
    expect(g.scoreStatus).toBe('completed');
    const harness = { patch_is_None: false, patch_exists: true, patch_successfully_applied: true, resolved: true, tests_status: SHLIB1_TESTS };
    // the harness's report entry, and how grading went (the header's word, in the body too)
    expect(g.json).toEqual({ 'test__shlib-1': { ...harness, status: 'completed' } });
    const e = await evaluate({ dataset: 'data', instance_id: 'test__shlib-2', patch: '', model: 'org/m', run_id: 'r1' });
    expect(e.status).toBe(200);
    expect(e.json).toEqual({
      'test__shlib-2': { patch_is_None: false, patch_exists: true, patch_successfully_applied: false, resolved: false, status: 'empty_patch' },
    });
    expect(e.scoreStatus).toBe('empty_patch');

    const summary = RunSummarySchema.parse(JSON.parse(readFileSync(join(reportsDir, 'org__m.r1.json'), 'utf8')));
    expect(summary).toMatchObject({
      total_instances: 2,
      submitted_ids: ['test__shlib-1', 'test__shlib-2'],
      resolved_ids: ['test__shlib-1'],
      empty_patch_ids: ['test__shlib-2'],
    });
    const dir = join(reportsDir, 'r1', 'org__m', 'test__shlib-1');
    // report.json stays the harness's own; result.json records what decided the verdict, for a `score` rerun
    expect(ReportFileSchema.parse(JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')))).toEqual({ 'test__shlib-1': harness });
    const result = ScoreResultSchema.parse(JSON.parse(readFileSync(join(dir, 'result.json'), 'utf8')));
    expect(result.inputs?.environment).toMatch(/^sha256:[0-9a-f]{64}$/);
    for (const f of ['patch.diff', 'eval.sh', 'test_output.txt', 'result.json']) expect(existsSync(join(dir, f)), f).toBe(true);
    // the evaluation sandboxes are gone
    expect(srv.manager.live).toBe(0);
  }, 600_000);

  it('a wrong patch is graded unresolved and one that does not apply says so; without run_id nothing is recorded', async () => {
    const wrong = gold('test__shlib-1').replace('echo "$2"; fi; }', 'echo 0; fi; }');
    expect(wrong).not.toBe(gold('test__shlib-1'));
    const unappliable = gold('test__shlib-1').replaceAll('max()', 'mux()');
    const before = readdirSync(reportsDir).sort();
    const [r, u] = await Promise.all([wrong, unappliable].map((patch) => evaluate({ dataset: 'data', instance_id: 'test__shlib-1', patch })));
    expect(r!.status).toBe(200);
    expect(r!.json['test__shlib-1']).toMatchObject({ resolved: false, patch_successfully_applied: true, status: 'completed' });
    expect(r!.scoreStatus).toBe('completed');
    // not the empty patch's answer: the body says the patch did not apply
    expect(u!.status).toBe(200);
    expect(u!.json['test__shlib-1']).toMatchObject({ resolved: false, patch_successfully_applied: false, status: 'patch_apply_failed' });
    expect(u!.scoreStatus).toBe('patch_apply_failed');
    expect(readdirSync(reportsDir).sort()).toEqual(before);
  }, 600_000);

  it('two concurrent evaluations of one run both land in its summary', async () => {
    const [a, b] = await Promise.all(
      ['test__shlib-1', 'test__shlib-2'].map((id) => evaluate({ dataset: 'data', instance_id: id, patch: gold(id), model: 'org/m', run_id: 'r2' })),
    );
    expect([a!.status, b!.status]).toEqual([200, 200]);
    const summary = RunSummarySchema.parse(JSON.parse(readFileSync(join(reportsDir, 'org__m.r2.json'), 'utf8')));
    expect(summary).toMatchObject({ submitted_ids: ['test__shlib-1', 'test__shlib-2'], resolved_ids: ['test__shlib-1', 'test__shlib-2'], error_ids: [] });
  }, 600_000);

  it('bad input is 422 naming the field; an unknown instance or dataset is 404', async () => {
    const noPatch = await evaluate({ dataset: 'data', instance_id: 'test__shlib-1' });
    expect(noPatch.status).toBe(422);
    expect(noPatch.json.error).toMatchObject({ code: 'INVALID_INPUT', field: 'patch' });
    const badRun = await evaluate({ dataset: 'data', instance_id: 'test__shlib-1', patch: '', run_id: '../escape' });
    expect(badRun.status).toBe(422);
    expect(badRun.json.error).toMatchObject({ field: 'run_id' });
    const extra = await evaluate({ dataset: 'data', instance_id: 'test__shlib-1', patch: '', colour: 'blue' });
    expect(extra.status).toBe(422);
    const unknown = await evaluate({ dataset: 'data', instance_id: 'test__shlib-99', patch: 'x' });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ code: 'NOT_FOUND' });
    expect(JSON.stringify(unknown.json)).toContain('test__shlib-99');
    const noDataset = await evaluate({ dataset: 'nope', instance_id: 'test__shlib-1', patch: 'x' });
    expect(noDataset.status).toBe(404);
    expect(JSON.stringify(noDataset.json)).toContain('data');
  });

  it('an app without a store, or without datasets to grade, answers 501 NOT_CONFIGURED', async () => {
    const t = 'a-token-long-enough-0123';
    const bare = buildApp(srv.manager, { token: t, log: () => undefined });
    const noDatasets = buildApp(srv.manager, {
      token: t,
      log: () => undefined,
      reg: new LocalRegistry(join(work, 'registry')),
      store: new StorePaths(join(work, 'store')),
    });
    try {
      for (const [app, says] of [
        [bare, /no store/],
        [noDatasets, /grades no dataset.*--eval-dataset/],
      ] as const) {
        const r = await app.inject({
          method: 'POST',
          url: '/v1/evaluate',
          headers: { authorization: `Bearer ${t}` },
          payload: { dataset: 'data', instance_id: 'test__shlib-1', patch: 'x' },
        });
        expect(r.statusCode).toBe(501);
        const err = (r.json() as { error: { code: string; message: string; hint?: string } }).error;
        expect(err.code).toBe('NOT_CONFIGURED');
        expect(`${err.message} ${err.hint}`).toMatch(says);
      }
    } finally {
      await bare.close();
      await noDatasets.close();
    }
  });
});
