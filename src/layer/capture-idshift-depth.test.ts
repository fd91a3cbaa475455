import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../errors.js';
import { captureAndRead, sh, tempDir } from '../../test/helpers/capture-util.js';

describe('capture with an id shift', () => {
  const t = tempDir('idshift');
  afterAll(() => t.cleanup());
  const base = 100000;

  it('subtracts the base from every uid and gid', async () => {
    const root = join(t.dir, 'ok');
    mkdirSync(root);
    sh(`cd ${root} && printf a > f && mkdir d && ln -s f l && chown -h ${base}:${base} f d l . && printf b > g && chown ${base + 1000}:${base + 1001} g`);
    const c = await captureAndRead(root, join(t.dir, 'm1'), { idShift: base });
    expect(c.byPath.get('f')).toMatchObject({ uid: 0, gid: 0 });
    expect(c.byPath.get('d')).toMatchObject({ uid: 0, gid: 0 });
    expect(c.byPath.get('l')).toMatchObject({ uid: 0, gid: 0 });
    expect(c.byPath.get('g')).toMatchObject({ uid: 1000, gid: 1001 });
  });

  it('does not hold whiteouts to the base: they carry no owner', async () => {
    const root = join(t.dir, 'wh');
    mkdirSync(root);
    sh(`cd ${root} && mkdir d && mknod d/gone c 0 0 && chown ${base}:${base} d && chown 0:0 d/gone`);
    const c = await captureAndRead(root, join(t.dir, 'm0'), { idShift: base, overlayUpper: true });
    expect(c.list).toEqual([expect.objectContaining({ path: 'd', uid: 0 }), { type: 'whiteout', path: 'd/gone' }]);
  });

  it('fails naming the entry when an id is below the base', async () => {
    const root = join(t.dir, 'bad');
    mkdirSync(root);
    sh(`cd ${root} && printf a > f && chown ${base}:${base} f && printf b > stray && chown 0:${base} stray`);
    const err = await captureAndRead(root, join(t.dir, 'm2'), { idShift: base }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as Error).message).toMatch(/"stray" has uid 0, below the id shift base 100000/);
  });
});

describe('capture of very deep trees', () => {
  const t = tempDir('deep');
  afterAll(() => t.cleanup());

  it('walks a tree 1000 levels deep without recursion', async () => {
    const root = join(t.dir, 'tree');
    mkdirSync(root);
    // 1000 levels of `d/`: 2000 bytes of path, under PATH_MAX
    mkdirSync(join(root, 'd/'.repeat(1000)), { recursive: true });
    writeFileSync(join(root, 'd/'.repeat(1000), 'f'), 'bottom');
    const c = await captureAndRead(root, join(t.dir, 'm1'));
    expect(c.entries).toBe(1001);
    expect(c.list.at(-1)).toMatchObject({ type: 'file', path: `${'d/'.repeat(1000)}f`, size: 6 });
  });

  it('fails clearly on paths longer than PATH_MAX', async () => {
    const root = join(t.dir, 'toolong');
    mkdirSync(root);
    // two halves, each short enough to create by absolute path, then joined by one rename
    const half = 'd123456789/'.repeat(210);
    mkdirSync(join(root, half), { recursive: true });
    mkdirSync(join(t.dir, 'half', half), { recursive: true });
    writeFileSync(join(t.dir, 'half', half, 'f'), 'x');
    renameSync(join(t.dir, 'half'), join(root, half, 'half'));
    const err = await captureAndRead(root, join(t.dir, 'm2')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as Error).message).toMatch(/PATH_MAX/);
    renameSync(join(root, half, 'half'), join(t.dir, 'half')); // so cleanup can remove both halves
  });
});
