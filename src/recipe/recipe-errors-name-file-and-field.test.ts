import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError, NotFoundError } from '../errors.js';
import { loadRecipe } from './load.js';

async function recipeFile(name: string, text: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'recipe-'));
  const f = join(dir, name);
  await writeFile(f, text);
  return f;
}

describe('loadRecipe', () => {
  it('names the file and the field path of a wrong type', async () => {
    const f = await recipeFile('env.yaml', 'kind: env\nparent: base.yaml\ncommands:\n  - apt-get update\n  - true\n  - [3]\n');
    const err = await loadRecipe(f).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as Error).message).toContain(`${f}: commands[1]: expected string, received boolean`);
    expect((err as Error).message).toContain('commands[2]: expected string, received array');
  });

  it('names nested fields and unknown keys', async () => {
    const f = await recipeFile('base.yaml', 'kind: base\nfrom:\n  type: debootstrap\n  include: [gpgv, "Bad Name"]\n  suite: bookworm\n  mirrors: x\n');
    const msg = String(await loadRecipe(f).catch((e: unknown) => (e as Error).message));
    expect(msg).toContain('from.include[1]: expected a Debian package name');
    expect(msg).toMatch(/from: Unrecognized key: "mirrors"/);
  });

  it('names the position of a YAML syntax error', async () => {
    const f = await recipeFile('x.yaml', 'kind: env\ncommands: [a, b\n');
    await expect(loadRecipe(f)).rejects.toThrow(new RegExp(`${f}:\\d+:\\d+: `));
  });

  it('rejects an unknown kind and a missing file', async () => {
    const f = await recipeFile('x.json', '{"kind": "layer"}');
    await expect(loadRecipe(f)).rejects.toThrow(`${f}: kind: `);
    await expect(loadRecipe(join(tmpdir(), 'no-such-recipe.yaml'))).rejects.toBeInstanceOf(NotFoundError);
  });

  it('fills defaults and resolves paths against the recipe file', async () => {
    const f = await recipeFile('env.yaml', 'kind: env\nparent: ../base.yaml\nfiles: [{src: conf/a.txt, dest: /etc/a.txt, mode: 0644}]\nenv: {N: 1, V: 1.0}\n');
    const { recipe } = await loadRecipe(f);
    if (recipe.kind !== 'env') throw new Error('expected an env recipe');
    const dir = join(f, '..');
    expect(recipe.parent).toEqual({ recipe: join(dir, '..', 'base.yaml') });
    expect(recipe.files[0]?.src).toBe(join(dir, 'conf/a.txt'));
    expect(recipe.files[0]?.mode).toBe(0o644);
    expect(recipe).toMatchObject({ network: true, workdir: '/', shell: '/bin/sh', commands: [] });
    // Numbers keep their spelling: YAML alone would turn 1.0 into "1".
    expect(recipe.env).toEqual({ N: '1', V: '1.0' });
  });
});
