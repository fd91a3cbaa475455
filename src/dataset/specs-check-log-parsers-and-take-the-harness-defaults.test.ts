import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSpecs, lookupSpec } from './specs.js';

async function specsFile(specs: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'specs-'));
  await writeFile(join(dir, 'specs.yaml'), specs);
  return join(dir, 'specs.yaml');
}

const image = 'image: docker://example/x:1';

describe('specs: log parsers and the harness multilingual fields', () => {
  it("takes the harness's parser for a repository when neither the entry nor defaults names one", async () => {
    const f = await specsFile(
      `repos:\n  jqlang/jq:\n    "2839": {${image}, testCmd: make check}\n` +
        `  immutable-js/immutable-js:\n    "2005": {${image}, testCmd: npx jest}\n  o/r:\n    "1.0": {${image}, testCmd: t}\n`,
    );
    const specs = await loadSpecs(f);
    expect(lookupSpec(specs, 'jqlang/jq', '2839', 'row').logParser).toBe('jq');
    expect(lookupSpec(specs, 'immutable-js/immutable-js', '2005', 'row').logParser).toBe('jest_json');
    // a repository the harness does not know keeps the old default
    expect(lookupSpec(specs, 'o/r', '1.0', 'row').logParser).toBe('pytest');
  });

  it('a named parser wins, in its harness spelling too', async () => {
    const f = await specsFile(
      `defaults: {logParser: parse_log_tap}\nrepos:\n  jqlang/jq:\n    "1": {${image}, testCmd: t}\n    "2": {${image}, testCmd: t, logParser: junit_xml}\n`,
    );
    const specs = await loadSpecs(f);
    expect(lookupSpec(specs, 'jqlang/jq', '1', 'row').logParser).toBe('tap');
    expect(lookupSpec(specs, 'jqlang/jq', '2', 'row').logParser).toBe('junit_xml');
  });

  it('refuses an unknown parser at load, naming the file and the field', async () => {
    const f = await specsFile(`repos:\n  o/r:\n    "1.0": {${image}, testCmd: t, logParser: nose}\n`);
    await expect(loadSpecs(f)).rejects.toThrow(`${f}: repos["o/r"]["1.0"].logParser: unknown log parser "nose"`);
    await expect(loadSpecs(f)).rejects.toMatchObject({ code: 'INVALID_INPUT', hint: expect.stringContaining('gotest') });
    const d = await specsFile(`defaults: {logParser: jestt}\nrepos:\n  o/r:\n    "1.0": {${image}, testCmd: t, logParser: jest}\n`);
    await expect(loadSpecs(d)).rejects.toThrow(`${d}: defaults.logParser: unknown log parser "jestt"`);
  });

  it('asks for a parser where the harness picks one per instance and knows none for the version', async () => {
    const f = await specsFile(`repos:\n  jekyll/jekyll:\n    "9999": {${image}, testCmd: t}\n`);
    await expect(loadSpecs(f)).rejects.toThrow(/\["9999"\]\.logParser: the harness picks jekyll\/jekyll's log parser per instance/);
  });

  it('takes testCmd as a list of commands, one per line, and a build list', async () => {
    const f = await specsFile(
      `repos:\n  google/gson:\n    "1":\n      ${image}\n      build: [mvn -q compile]\n      testCmd:\n` +
        '        - mvnd test -Dtest=A#a\n        - mvnd test -Dtest=A#b\n',
    );
    const spec = lookupSpec(await loadSpecs(f), 'google/gson', '1', 'row');
    expect(spec).toMatchObject({ testCmd: 'mvnd test -Dtest=A#a\nmvnd test -Dtest=A#b', build: ['mvn -q compile'], logParser: 'maven' });
    const empty = await specsFile(`repos:\n  o/r:\n    "1": {${image}, testCmd: []}\n`);
    await expect(loadSpecs(empty)).rejects.toThrow(/testCmd: expected the test command/);
  });
});
