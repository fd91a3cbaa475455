import { describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { EntrySchema, fastEntry, parseEntryLine } from './manifest.js';
import { checkRelativePath, comparePaths } from './path.js';

const D = `sha256:${'ab'.repeat(32)}`;
const meta = { mode: 0o644, uid: 1000, gid: 1000, mtime: '1600000000123456789' };
const valid: object[] = [
  { type: 'file', path: 'a/b.txt', ...meta, size: 12, digest: D },
  { type: 'dir', path: 'a', ...meta },
  { type: 'dir', path: 'o', ...meta, opaque: true },
  { type: 'symlink', path: 'l', ...meta, target: '../x' },
  { type: 'fifo', path: 'p', ...meta },
  { type: 'char', path: 'c', ...meta, major: 1, minor: 3 },
  { type: 'block', path: 'b', ...meta, major: 8, minor: 0 },
  { type: 'hardlink', path: 'h', target: 'a/b.txt' },
  { type: 'whiteout', path: 'w' },
  { type: 'file', path: 'x', ...meta, size: 0, digest: D, xattrs: { 'user.a': 'eA==' } },
];

/** Values that break some rule of some field (or an edge the schema may or may not accept). */
const oddValues: unknown[] = [
  undefined,
  null,
  true,
  false,
  0,
  -0,
  1,
  -1,
  0.5,
  0o7777,
  0o10000,
  0xffffffff,
  2 ** 32,
  2 ** 53,
  Number.MAX_SAFE_INTEGER,
  '',
  'x',
  '0',
  '-5',
  '12a',
  '9'.repeat(31),
  D,
  D.toUpperCase(),
  `sha256:${'a'.repeat(63)}`,
  [],
  {},
  { a: 1 },
  'file',
  'dir',
];
const keys = ['type', 'path', 'mode', 'uid', 'gid', 'mtime', 'size', 'digest', 'target', 'opaque', 'major', 'minor', 'xattrs', 'extra', '__proto__'];

function mutations(seed: number, n: number): unknown[] {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const out: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const base = { ...(pick(valid) as Record<string, unknown>) };
    const edits = 1 + Math.floor(r() * 3);
    for (let k = 0; k < edits; k++) {
      const key = pick(keys);
      const v = pick(oddValues);
      if (v === undefined && r() < 0.5) delete base[key];
      else Object.defineProperty(base, key, { value: v, enumerable: true, writable: true, configurable: true });
    }
    // through JSON, as lines arrive
    out.push(JSON.parse(JSON.stringify(base)));
  }
  return out;
}

describe('the fast entry check never accepts what EntrySchema rejects, and agrees on what it accepts', () => {
  it('on every kind of valid entry', () => {
    for (const e of valid) {
      const json: unknown = JSON.parse(JSON.stringify(e));
      const fast = fastEntry(json);
      const zod = EntrySchema.safeParse(json);
      expect(zod.success).toBe(true);
      // xattrs are left to the schema; everything else takes the fast path
      if ('xattrs' in e) expect(fast).toBeUndefined();
      else expect(fast).toEqual(zod.data);
    }
  });

  it('on 20000 mutated entries', () => {
    let fastAccepted = 0;
    let rejected = 0;
    for (const json of mutations(7, 20000)) {
      const fast = fastEntry(json);
      const zod = EntrySchema.safeParse(json);
      if (!zod.success) rejected++;
      if (fast !== undefined) {
        fastAccepted++;
        expect(zod.success, JSON.stringify(json)).toBe(true);
        expect(fast).toEqual(zod.data);
      }
    }
    // the mutations really exercise both sides
    expect(fastAccepted).toBeGreaterThan(500);
    expect(rejected).toBeGreaterThan(5000);
  });
});

describe('parseEntryLine checks paths and order exactly as checkRelativePath and comparePaths do', () => {
  const names = [
    'a',
    'b',
    'a/b',
    'a-b',
    'a/',
    '/a',
    'a//b',
    './a',
    'a/.',
    'a/..',
    '..',
    '.',
    '.a',
    'a..',
    '\\x2fa',
    'a\\x00b',
    'a\\\\',
    'é',
    'é/x',
    '\u{1F600}',
    '\uE000',
    '\uFFFD',
    'a\u0000b',
    'ab\\x41',
  ];
  const line = (path: string): string => JSON.stringify({ gid: 0, mode: 420, mtime: '0', path, type: 'fifo', uid: 0 });
  const outcome = (f: () => unknown): string => {
    try {
      f();
      return 'ok';
    } catch (e) {
      return (e as Error).message;
    }
  };

  it('accepts and rejects the same paths, with the same message', () => {
    for (const p of names) {
      expect(
        outcome(() => parseEntryLine(line(p), 2, undefined, 'm')),
        p,
      ).toBe(outcome(() => checkRelativePath(p)));
    }
  });

  it('orders every pair of paths as comparePaths does', () => {
    const ok = names.filter((p) => outcome(() => checkRelativePath(p)) === 'ok');
    for (const a of ok) {
      for (const b of ok) {
        const inOrder = outcome(() => parseEntryLine(line(b), 3, a, 'm')) === 'ok';
        expect(inOrder, `${a} then ${b}`).toBe(comparePaths(a, b) < 0);
      }
    }
  });
});
