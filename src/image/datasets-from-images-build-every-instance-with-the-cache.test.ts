import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { loadSpecs } from '../dataset/specs.js';
import { evalSpecFromDataset } from '../score/dataset-spec.js';
import { imageForRow, swebenchImageId } from './dataset-images.js';

const work = mkdtempSync(join(tmpdir(), 'ms-image-dataset-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const cli = resolve('bin/minisandbox');

const ROWS = [
  { instance_id: 'acme__widgets-1', repo: 'acme/widgets', version: '1.0' },
  { instance_id: 'acme__widgets-2', repo: 'acme/widgets', version: '1.0' },
  { instance_id: 'acme__gadgets-7', repo: 'acme/gadgets', version: '2.0' },
  { instance_id: 'acme__broken-1', repo: 'acme/broken', version: '0.1' },
].map((r) => ({
  ...r,
  base_commit: 'a'.repeat(40),
  environment_setup_commit: 'a'.repeat(40),
  patch: '',
  test_patch: '',
  FAIL_TO_PASS: '[]',
  PASS_TO_PASS: '[]',
}));

beforeAll(async () => {
  // one layout: a tag per widgets instance (SWE-bench's naming), one image for all of gadgets 2.0
  const base = await makeTar([
    { name: 'etc/', type: 'directory' },
    { name: 'etc/os-release', data: 'ID=test\n' },
  ]);
  const own = async (s: string): Promise<Buffer> =>
    makeTar([
      { name: 'testbed/', type: 'directory' },
      { name: 'testbed/id', data: s },
    ]);
  writeLayout(join(work, 'layout'), [
    {
      tag: `sweb.eval.x86_64.${swebenchImageId('acme__widgets-1')}`,
      layers: [
        { blob: base, tar: base },
        { blob: await own('1'), tar: await own('1') },
      ],
      config: { WorkingDir: '/testbed' },
    },
    {
      tag: `sweb.eval.x86_64.${swebenchImageId('acme__widgets-2')}`,
      layers: [
        { blob: base, tar: base },
        { blob: await own('2'), tar: await own('2') },
      ],
      config: { WorkingDir: '/testbed' },
    },
    {
      tag: 'gadgets-2.0',
      layers: [
        { blob: base, tar: base },
        { blob: await own('g'), tar: await own('g') },
      ],
    },
  ]);
  writeFileSync(join(work, 'data.jsonl'), ROWS.map((r) => JSON.stringify(r)).join('\n') + '\n');
  writeFileSync(
    join(work, 'specs.yaml'),
    [
      'defaults:',
      `  image: "oci:${join(work, 'layout')}:sweb.eval.x86_64.{id}"`,
      '  testCmd: pytest -rA',
      '  preTest: ["source /opt/miniconda3/bin/activate", "conda activate testbed"]',
      'repos:',
      '  acme/widgets:',
      '    "1.0": {}',
      '  acme/gadgets:',
      `    "2.0": {image: "oci:${join(work, 'layout')}:gadgets-2.0"}`,
      '  acme/broken:',
      `    "0.1": {image: "oci:${join(work, 'layout')}:no-such-tag"}`,
    ].join('\n'),
  );
});

async function build(
  ...args: string[]
): Promise<{ code: number; out: { summary: Record<string, number>; nodes: Array<{ label: string; status: string; tag?: string }> } }> {
  const r = await promisify(execFile)(cli, [
    '--json',
    '--registry',
    join(work, 'registry'),
    '--store',
    join(work, 'store'),
    'build',
    join(work, 'data.jsonl'),
    '--specs',
    join(work, 'specs.yaml'),
    ...args,
  ]).then(
    (x) => ({ code: 0, stdout: x.stdout }),
    (e: { code: number; stdout: string }) => ({ code: e.code, stdout: e.stdout }),
  );
  return { code: r.code, out: JSON.parse(r.stdout) as { summary: Record<string, number>; nodes: Array<{ label: string; status: string; tag?: string }> } };
}

describe('image names for dataset rows', () => {
  it("follow SWE-bench's naming: lowercased, `__` as `_1776_`, docker:// implied", () => {
    expect(imageForRow('swebench/sweb.eval.x86_64.{id}:latest', { instance_id: 'Django__django-11099', repo: 'django/django', version: '3.0' })).toBe(
      'docker://swebench/sweb.eval.x86_64.django_1776_django-11099:latest',
    );
    expect(imageForRow('oci:/x:{repo}-{version}-{instance_id}', { instance_id: 'a__b-1', repo: 'a/b', version: '1' })).toBe('oci:/x:a/b-1-a__b-1');
  });

  it('specs with images need no base or env, and their preTest runs before the tests when scoring', async () => {
    const specs = await loadSpecs(join(work, 'specs.yaml'));
    const w = specs.entries.get('acme/widgets@1.0')!;
    expect(w.image).toMatch(/\{id\}$/);
    expect(evalSpecFromDataset(w).preCommands).toEqual(['source /opt/miniconda3/bin/activate', 'conda activate testbed']);
  });
});

describe('build DATASET with image specs', () => {
  it('imports each instance under <dataset>/<instance_id>, keeps going past a missing image, and a rerun finds them all cached', async () => {
    const first = await build('--jobs', '2', '--keep-going');
    expect(first.code).toBe(1);
    const byLabel = new Map(first.out.nodes.map((n) => [n.label, n]));
    expect(byLabel.get('acme__widgets-1')).toMatchObject({ status: 'built', tag: 'data/acme__widgets-1' });
    expect(byLabel.get('acme__gadgets-7')).toMatchObject({ status: 'built' });
    expect(byLabel.get('acme__broken-1')).toMatchObject({ status: 'failed' });
    const again = await build('--jobs', '2', '--keep-going');
    expect(again.out.summary).toMatchObject({ built: 0, cached: 3, failed: 1 });
  }, 120_000);

  it('--shard takes its part of the rows only', async () => {
    const shard = await build('--shard', '0/2', '--keep-going');
    // rows sorted by (repo, version, id): broken-1, gadgets-7 | widgets-1, widgets-2
    expect(shard.out.nodes.map((n) => n.label).sort()).toEqual(['acme__broken-1', 'acme__gadgets-7']);
  }, 120_000);
});
