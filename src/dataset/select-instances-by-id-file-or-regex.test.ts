import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError, NotFoundError } from '../errors.js';
import { loadSelection, parseSelection, selectInstances, splitIds } from './select.js';

const rows = ['django__django-1', 'django__django-2', 'flask__flask-7', 'astropy__astropy-3'].map((instance_id) => ({ instance_id }));
const id = (r: { instance_id: string }): string => r.instance_id;

describe('selecting instances', () => {
  it('takes every row when nothing is asked for', () => {
    expect(selectInstances(rows, parseSelection({}), id)).toEqual(rows);
  });

  it('keeps dataset order whatever order the ids are given in', () => {
    const sel = parseSelection({ instances: 'flask__flask-7,django__django-1' });
    expect(selectInstances(rows, sel, id).map(id)).toEqual(['django__django-1', 'flask__flask-7']);
  });

  it('reads /regex/ in --instances and --instances-regex, and joins them with listed ids', () => {
    expect(selectInstances(rows, parseSelection({ instances: '/^django__/' }), id).map(id)).toEqual(['django__django-1', 'django__django-2']);
    expect(selectInstances(rows, parseSelection({ instances: 'astropy__astropy-3', instancesRegex: 'flask' }), id).map(id)).toEqual([
      'flask__flask-7',
      'astropy__astropy-3',
    ]);
  });

  it('refuses unknown ids with not-found, naming them, instead of skipping them', () => {
    const err = (() => {
      try {
        selectInstances(rows, parseSelection({ instances: 'django__django-1,django__django-99,nope' }), id);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as Error).message).toContain('django__django-99, nope');
    expect(() => selectInstances(rows, parseSelection({ instances: '/^sympy/' }), id)).toThrow(NotFoundError);
  });

  it('refuses an invalid regex or an empty list as invalid input', () => {
    expect(() => parseSelection({ instancesRegex: '(' })).toThrow(InvalidInputError);
    expect(() => parseSelection({ instances: ' , ' })).toThrow(InvalidInputError);
  });

  it('reads an ids file: one per line or comma-separated, with comments', async () => {
    expect(splitIds('a\n# all of b\nb, c  # c too\n\n')).toEqual(['a', 'b', 'c']);
    const dir = await mkdtemp(join(tmpdir(), 'select-'));
    try {
      await writeFile(join(dir, 'ids.txt'), 'flask__flask-7\ndjango__django-2\n');
      const sel = await loadSelection({ instancesFile: join(dir, 'ids.txt') });
      expect(selectInstances(rows, sel, id).map(id)).toEqual(['django__django-2', 'flask__flask-7']);
      await expect(loadSelection({ instancesFile: join(dir, 'missing.txt') })).rejects.toThrow(NotFoundError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
