/**
 * `score` as a user runs it (bin/minisandbox, spawned): every input is checked before the first
 * instance is graded, so a bad one is one error naming what to fix and no report at all, never a
 * run that grades some instances and reports the others as per-instance errors (or, for an id the
 * dataset lacks, a run that exits 0 with nothing completed). `build` refuses an unknown log parser
 * as it loads the specs.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Ran, runCli } from '../../test/helpers/run-cli.js';
import { pushTree } from '../publish/push.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';

const work = mkdtempSync(join(tmpdir(), 'ms-score-inputs-'));
chmodSync(work, 0o755); // the sandboxes' subordinate ids must reach the store below it
const registry = join(work, 'registry');
const rowsFile = join(work, 'data.jsonl');
const rows = readFileSync(resolve('recipes/test/dataset.jsonl'), 'utf8')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => JSON.parse(l) as { instance_id: string; patch: string; version: string });

/** `score`; each test gives a report dir of its own. */
function score(reports: string, specs: string, predictions: string): Promise<Ran> {
  return runCli([
    '--registry',
    registry,
    '--store',
    join(work, 'store'),
    'score',
    rowsFile,
    '--specs',
    specs,
    '--predictions',
    predictions,
    '--report-dir',
    reports,
  ]);
}

function specsFile(name: string, entries: string[]): string {
  const file = join(work, name);
  // image entries: nothing to build or load besides the file itself
  writeFileSync(
    file,
    ['defaults:', '  image: "docker://localhost/none:{id}"', '  testCmd: sh run_tests.sh', 'repos:', '  test/shlib:', ...entries, ''].join('\n'),
  );
  return file;
}

function predictionsFile(name: string, preds: Array<{ instance_id: string; model_patch: unknown }>): string {
  const file = join(work, name);
  writeFileSync(file, preds.map((p) => JSON.stringify({ ...p, model_name_or_path: 'm' })).join('\n') + '\n');
  return file;
}

const GOOD_SPECS = () => specsFile('good.yaml', ['    "1.0": {logParser: pytest}']);
const gold = (id: string) => ({ instance_id: id, model_patch: rows.find((r) => r.instance_id === id)!.patch });

beforeAll(async () => {
  writeFileSync(rowsFile, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  // an environment for each instance (busybox: any grading would error, not resolve)
  for (const r of rows) await pushTree(new LocalRegistry(registry), new StorePaths(join(work, 'push')), root, { tag: `data/${r.instance_id}` });
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('score checks every input before grading', () => {
  it('a prediction for an instance the dataset lacks is exit 3 naming the ids, and nothing is graded', async () => {
    const preds = predictionsFile('unknown.jsonl', [
      gold('test__shlib-1'),
      { instance_id: 'test__shlib-77', model_patch: 'x' },
      { instance_id: 'zz__z-1', model_patch: null },
    ]);
    const reports = join(work, 'reports-1');
    const r = await score(reports, GOOD_SPECS(), preds);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain('test__shlib-77');
    expect(r.stderr).toContain('zz__z-1');
    expect(r.stderr).toContain('hint:');
    expect(existsSync(reports)).toBe(false);
  });

  it('a specs file without the version an instance needs is exit 2 naming the file and the entry, and nothing is graded', async () => {
    const specs = specsFile('no-version.yaml', ['    "0.9": {}']);
    const reports = join(work, 'reports-2');
    const r = await score(reports, specs, predictionsFile('gold1.jsonl', [gold('test__shlib-1'), gold('test__shlib-2')]));
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(specs);
    expect(r.stderr).toContain('repos["test/shlib"]["1.0"]');
    expect(existsSync(reports)).toBe(false);
  });

  it('an unknown log parser is exit 2 naming the file and the field, for score and for build', async () => {
    const specs = specsFile('bad-parser.yaml', ['    "1.0": {logParser: pytset}']);
    const reports = join(work, 'reports-3');
    const r = await score(reports, specs, predictionsFile('gold2.jsonl', [gold('test__shlib-1')]));
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(specs);
    expect(r.stderr).toMatch(/logParser/);
    expect(r.stderr).toContain('pytest_v2'); // the names it could have been
    expect(existsSync(reports)).toBe(false);
    const built = await runCli(['--registry', registry, '--store', join(work, 'store'), 'build', rowsFile, '--specs', specs]);
    expect(built.code, built.stderr).toBe(2);
    expect(built.stderr).toMatch(/logParser/);
  });

  it('an instance whose environment the registry lacks is exit 3 naming the ref, and nothing is graded', async () => {
    await new LocalRegistry(registry).deleteRef('data/test__shlib-2');
    const reports = join(work, 'reports-4');
    const r = await score(reports, GOOD_SPECS(), predictionsFile('gold3.jsonl', [gold('test__shlib-1'), gold('test__shlib-2')]));
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain('data/test__shlib-2');
    expect(r.stderr).not.toContain('data/test__shlib-1');
    expect(existsSync(reports)).toBe(false);
  });
});
