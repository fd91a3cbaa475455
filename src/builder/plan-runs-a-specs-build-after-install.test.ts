import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { DatasetRowSchema } from '../dataset/row.js';
import { loadSpecs } from '../dataset/specs.js';
import { defaultRepoSource, planDataset } from './plan.js';

it("runs a spec's build after its install in the instance build, as the harness's instance script", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'plan-build-'));
  await writeFile(join(dir, 'base.yaml'), 'kind: base\nfrom: {type: busybox}\n');
  await writeFile(
    join(dir, 'specs.yaml'),
    'base: base.yaml\nrepos:\n  jqlang/jq:\n    "2839":\n      env: {kind: env, commands: [echo env]}\n' +
      '      preInstall: [git submodule update --init]\n      install: [autoreconf -fi]\n      build: [./configure, make -j2]\n      testCmd: make check\n',
  );
  const specs = await loadSpecs(join(dir, 'specs.yaml'));
  const row = DatasetRowSchema.parse({ instance_id: 'jqlang__jq-2839', repo: 'jqlang/jq', version: '2839', base_commit: 'a'.repeat(40) });
  const plan = planDataset({ dataset: 'ml', rows: [{ where: 'd.jsonl:1', row }], specs, repoSource: defaultRepoSource('/srv/repos') });
  const inst = plan.nodes.find((n) => n.id === 'instance:jqlang__jq-2839');
  expect(inst?.recipe).toMatchObject({ commands: ['git submodule update --init', 'autoreconf -fi', './configure', 'make -j2'] });
  expect(inst?.test).toMatchObject({ testCmd: 'make check', logParser: 'jq' });
});
