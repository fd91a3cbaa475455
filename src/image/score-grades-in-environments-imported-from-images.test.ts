/**
 * The whole path a SWE-bench user takes, for real: per-instance eval images (Debian with git, the
 * repository at its base commit in /testbed, an env to activate) pushed to a loopback distribution
 * registry, imported as a dataset by `build` through specs naming the image template, then graded
 * by `score` in fresh sandboxes of those environments with the specs' preTest activating the env.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeWorkDir, type RunningRegistry, startRegistry } from '../../test/helpers/images.js';
import { type SwebenchLikeImages, swebenchLikeImages, writeShlibSpecs } from '../../test/helpers/swebench-like-images.js';
import { ReportFileSchema, RunSummarySchema } from '../score/report.js';

const exec = promisify(execFile);
const cli = resolve('bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-image-score-'));
chmodSync(work, 0o755); // the sandboxes' subordinate ids must reach the store below it
let images: SwebenchLikeImages;
let registry: RunningRegistry;

async function run(...args: string[]): Promise<{ code: number; out: Record<string, unknown>; stderr: string }> {
  const r = await exec(cli, ['--json', '--registry', join(work, 'registry'), '--store', join(work, 'store'), ...args], { maxBuffer: 64 << 20 }).then(
    (x) => ({ code: 0, stdout: x.stdout, stderr: x.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
  return { code: r.code, out: JSON.parse(r.stdout) as Record<string, unknown>, stderr: r.stderr };
}

beforeAll(async () => {
  images = await swebenchLikeImages();
  registry = await startRegistry(join(work, 'docker-registry'));
  for (const row of images.rows) {
    const tag = images.tagFor(row.instance_id);
    await exec('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', `oci:${images.layout}:${tag}`, `docker://${registry.host}/swebench/${tag}:latest`]);
  }
  writeFileSync(join(work, 'data.jsonl'), images.rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  // SWE-bench's own naming, on the loopback registry (no transport: docker:// is implied)
  writeShlibSpecs(join(work, 'specs.yaml'), images, { image: `${registry.host}/swebench/sweb.eval.x86_64.{id}:latest` });
}, 900_000);

afterAll(async () => {
  await registry?.stop();
  removeWorkDir(work);
});

describe('score in environments imported from images', () => {
  it('build imports each instance image; the gold patch resolves, a wrong one does not, an empty one is not run; reports have the harness shape', async () => {
    const built = await run('build', join(work, 'data.jsonl'), '--specs', join(work, 'specs.yaml'), '--tls-verify', 'false', '--jobs', '2');
    expect(built.code, built.stderr).toBe(0);
    const nodes = built.out.nodes as Array<{ label: string; status: string; tag?: string }>;
    expect(nodes.map((n) => [n.label, n.status, n.tag]).sort()).toEqual([
      ['test__shlib-1', 'built', 'data/test__shlib-1'],
      ['test__shlib-2', 'built', 'data/test__shlib-2'],
    ]);

    const reportDir = join(work, 'reports');
    const gold = await run(
      'score',
      join(work, 'data.jsonl'),
      '--specs',
      join(work, 'specs.yaml'),
      '--predictions',
      'gold',
      '--run-id',
      'gold',
      '--report-dir',
      reportDir,
      '--jobs',
      '2',
      '--timeout',
      '300',
    );
    expect(gold.code, gold.stderr).toBe(0);
    const goldSummary = RunSummarySchema.parse(JSON.parse(readFileSync(join(reportDir, 'gold.gold.json'), 'utf8')));
    expect(goldSummary).toMatchObject({ resolved_ids: ['test__shlib-1', 'test__shlib-2'], error_ids: [], unresolved_ids: [] });
    // the specs' preTest ran before the tests (the test command exists only in the activated env)
    const goldLog = readFileSync(join(reportDir, 'gold', 'gold', 'test__shlib-1', 'test_output.txt'), 'utf8');
    expect(goldLog).toContain('+ source /opt/env/activate');
    expect(goldLog).toContain('PASSED tests/test_lib.sh::test_max_second');

    const row1 = images.rows.find((r) => r.instance_id === 'test__shlib-1')!;
    const fixed = '+max() { if [ "$1" -gt "$2" ]; then echo "$1"; else echo "$2"; fi; }';
    expect(row1.patch).toContain(fixed);
    // applies where the gold patch does, but breaks max instead of fixing it
    const wrong = row1.patch.replace(fixed, '+max() { echo 0; }');
    writeFileSync(
      join(work, 'preds.jsonl'),
      [
        { instance_id: 'test__shlib-1', model_patch: wrong, model_name_or_path: 'org/model' },
        { instance_id: 'test__shlib-2', model_patch: '', model_name_or_path: 'org/model' },
      ]
        .map((p) => JSON.stringify(p))
        .join('\n') + '\n',
    );
    const bad = await run(
      'score',
      join(work, 'data.jsonl'),
      '--specs',
      join(work, 'specs.yaml'),
      '--predictions',
      join(work, 'preds.jsonl'),
      '--run-id',
      'r1',
      '--report-dir',
      reportDir,
      '--timeout',
      '300',
    );
    expect(bad.code, bad.stderr).toBe(0);
    const summary = RunSummarySchema.parse(JSON.parse(readFileSync(join(reportDir, 'org__model.r1.json'), 'utf8')));
    expect(summary).toMatchObject({
      total_instances: 2,
      submitted_instances: 2,
      completed_instances: 1,
      resolved_instances: 0,
      unresolved_ids: ['test__shlib-1'],
      empty_patch_ids: ['test__shlib-2'],
      error_ids: [],
    });
    const reportText = readFileSync(join(reportDir, 'r1', 'org__model', 'test__shlib-1', 'report.json'), 'utf8');
    const report = ReportFileSchema.parse(JSON.parse(reportText));
    // SWE-bench's report.json: exactly these keys, in its order
    expect(report).toEqual({
      'test__shlib-1': {
        patch_is_None: false,
        patch_exists: true,
        patch_successfully_applied: true,
        resolved: false,
        tests_status: {
          FAIL_TO_PASS: { success: [], failure: ['tests/test_lib.sh::test_max_second'] },
          PASS_TO_PASS: { success: ['tests/test_lib.sh::test_add', 'tests/test_lib.sh::test_abs_positive'], failure: ['tests/test_lib.sh::test_max_first'] },
          FAIL_TO_FAIL: { success: [], failure: [] },
          PASS_TO_FAIL: { success: [], failure: [] },
        },
      },
    });
    const raw = JSON.parse(reportText) as Record<string, Record<string, unknown>>;
    expect(Object.keys(raw['test__shlib-1']!)).toEqual(['patch_is_None', 'patch_exists', 'patch_successfully_applied', 'resolved', 'tests_status']);
    expect(Object.keys(raw['test__shlib-1']!.tests_status as object)).toEqual(['FAIL_TO_PASS', 'PASS_TO_PASS', 'FAIL_TO_FAIL', 'PASS_TO_FAIL']);
  }, 900_000);
});
