import { describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { fastPackIndexFile, PACK_INDEX_FORMAT, PackIndexFileSchema } from './pack-index.js';

const D = (c: string): string => `sha256:${c.repeat(64)}`;
const index = {
  format: PACK_INDEX_FORMAT,
  pack: D('a'),
  packSize: 3000,
  frames: [
    { offset: 0, length: 1000, rawLength: 4096 },
    { offset: 1000, length: 2000, rawLength: 1024 },
  ],
  objects: [
    { digest: D('1'), size: 10, frame: 0, offset: 512 },
    { digest: D('2'), size: 0, frame: 1, offset: 512 },
  ],
};

const odd: unknown[] = [
  undefined,
  null,
  -1,
  -0,
  0,
  0.5,
  1,
  511,
  512,
  1000,
  2 ** 50,
  2 ** 50 + 512,
  2 ** 53,
  '512',
  '',
  [],
  {},
  D('b'),
  D('B'),
  PACK_INDEX_FORMAT,
  'other/1',
];

function mutate(r: () => number): unknown {
  const x = JSON.parse(JSON.stringify(index)) as Record<string, unknown> & { frames: Record<string, unknown>[]; objects: Record<string, unknown>[] };
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const where = r();
  const target: Record<string, unknown> = where < 0.3 ? x : where < 0.6 ? pick(x.frames) : pick(x.objects);
  const key = pick([...Object.keys(target), 'extra']);
  const v = pick(odd);
  if (v === undefined) delete target[key];
  else target[key] = v;
  if (r() < 0.1) x.frames = [];
  return JSON.parse(JSON.stringify(x));
}

describe('the fast pack index check never accepts what PackIndexFileSchema rejects', () => {
  it('accepts a well-formed index as the schema parses it', () => {
    const zod = PackIndexFileSchema.safeParse(index);
    expect(zod.success).toBe(true);
    expect(fastPackIndexFile(JSON.parse(JSON.stringify(index)))).toEqual(zod.data);
  });

  it('on 5000 mutated indexes', () => {
    const r = rng(11);
    let accepted = 0;
    let rejected = 0;
    for (let i = 0; i < 5000; i++) {
      const json = mutate(r);
      const fast = fastPackIndexFile(json);
      const zod = PackIndexFileSchema.safeParse(json);
      if (!zod.success) rejected++;
      if (fast !== undefined) {
        accepted++;
        expect(zod.success, JSON.stringify(json)).toBe(true);
        expect(fast).toEqual(zod.data);
      }
    }
    expect(accepted).toBeGreaterThan(200);
    expect(rejected).toBeGreaterThan(1000);
  });
});
