import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSpecs, lookupSpec } from './specs.js';

async function specsDir(specs: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'specs-'));
  await writeFile(join(dir, 'base.yaml'), 'kind: base\nfrom: {type: busybox}\n');
  await writeFile(join(dir, 'env.yaml'), 'kind: env\nparent: base.yaml\ncommands: [echo hi]\n');
  await writeFile(join(dir, 'specs.yaml'), specs);
  return join(dir, 'specs.yaml');
}

describe('specs', () => {
  it('resolves env recipes by path or inline, fills defaults, keeps unquoted versions as spelled', async () => {
    const f = await specsDir(`base: base.yaml
defaults: {testCmd: pytest -rA}
repos:
  o/r:
    1.0: {env: env.yaml, install: [pip install -e .]}
    1.10:
      env: {kind: env, commands: [echo inline]}
      testCmd: ./run-tests
`);
    const specs = await loadSpecs(f);
    const a = lookupSpec(specs, 'o/r', '1.0', 'row 1');
    expect(a).toMatchObject({ testCmd: 'pytest -rA', logParser: 'pytest', workdir: '/testbed', install: ['pip install -e .'] });
    expect(specs.catalog.get(a.env)?.recipe.kind).toBe('env');
    const b = lookupSpec(specs, 'o/r', '1.10', 'row 2');
    expect(b.testCmd).toBe('./run-tests');
    const inline = specs.catalog.get(b.env)?.recipe;
    // An inline env without a parent sits on the specs' base.
    expect(inline?.kind === 'env' && inline.parent).toEqual({ recipe: specs.base });
    expect(specs.catalog.size).toBe(3);
  });

  it('takes every field a version leaves out from defaults, including those with a built-in default', async () => {
    // Found grading a unittest dataset: defaults.logParser was ignored (the version's own spec
    // filled in the built-in 'pytest' first), so every test was "missing" from the log.
    const specs = await loadSpecs(
      await specsDir(
        'base: base.yaml\ndefaults: {testCmd: t, logParser: unittest, workdir: /src, install: [make], evalEnv: ' +
          '{A: "1"}}\nrepos:\n  o/r:\n    "1.0": {env: env.yaml}\n    "2.0": {env: env.yaml, logParser: django}\n',
      ),
    );
    expect(lookupSpec(specs, 'o/r', '1.0', 'row')).toMatchObject({ logParser: 'unittest', workdir: '/src', install: ['make'], evalEnv: { A: '1' } });
    expect(lookupSpec(specs, 'o/r', '2.0', 'row').logParser).toBe('django');
  });

  it('takes YAML merge keys, so versions can share one entry', async () => {
    const specs = await loadSpecs(
      await specsDir(
        'base: base.yaml\nx-django: &django {env: env.yaml, testCmd: ./tests/runtests.py, logParser: django}\nrepos:\n  o/r:\n' +
          '    "3.0": *django\n    "3.1": {<<: *django, testCmd: ./tests/runtests.py --parallel 1}\n',
      ),
    );
    expect(lookupSpec(specs, 'o/r', '3.0', 'row')).toMatchObject({ testCmd: './tests/runtests.py', logParser: 'django' });
    expect(lookupSpec(specs, 'o/r', '3.1', 'row')).toMatchObject({ testCmd: './tests/runtests.py --parallel 1', logParser: 'django' });
  });

  it('names the instance and what exists when a repo or version is unknown', async () => {
    const specs = await loadSpecs(await specsDir('base: base.yaml\nrepos:\n  o/r:\n    "1.0": {env: env.yaml, testCmd: t}\n'));
    expect(() => lookupSpec(specs, 'o/r', '2.0', 'd.jsonl:7')).toThrow(
      /^d\.jsonl:7: no spec for repo o\/r version "2\.0" in .*\(it has versions "1\.0" of o\/r\)$/,
    );
    expect(() => lookupSpec(specs, 'x/y', '1.0', 'd.jsonl:8')).toThrow(/d\.jsonl:8: .*it has no entry for repo x\/y/);
  });

  it('names the field of a bad spec and a wrong recipe kind', async () => {
    const f = await specsDir('base: base.yaml\nrepos:\n  o/r:\n    "1.0": {env: env.yaml}\n');
    await expect(loadSpecs(f)).rejects.toThrow(`${f}: repos["o/r"]["1.0"]: testCmd: `);
    const g = await specsDir('base: env.yaml\nrepos: {}\n');
    await expect(loadSpecs(g)).rejects.toThrow(/base: .*env\.yaml is a env recipe, expected kind: base/);
  });
});
