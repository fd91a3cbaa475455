import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import type { Entry } from './manifest.js';
import { stack } from './stack.js';

const meta = { mode: 0o644, uid: 0, gid: 0, mtime: '0' };
const file = (path: string, content = path): Entry => ({ type: 'file', path, ...meta, size: content.length, digest: sha256(content) });
const dir = (path: string, opaque = false): Entry => ({ type: 'dir', path, ...meta, mode: 0o755, ...(opaque ? { opaque: true as const } : {}) });
const wh = (path: string): Entry => ({ type: 'whiteout', path });
const hard = (path: string, target: string): Entry => ({ type: 'hardlink', path, target });
const summary = (layers: Entry[][]): string[] =>
  stack(layers).map((s) => `${s.layer}:${s.entry.path}:${s.entry.type}${s.entry.type === 'hardlink' ? `>${s.entry.target}` : ''}`);

describe('stack rules', () => {
  it('a layer whiteout or opaque dir never hides entries of the same layer', () => {
    expect(
      summary([
        [dir('d'), file('d/old')],
        [dir('d', true), file('d/new')],
      ]),
    ).toEqual(['1:d:dir', '1:d/new:file']);
    expect(summary([[file('x')], [wh('x')], [file('x')]])).toEqual(['2:x:file']);
  });

  it('an upper file replaces a lower dir and its whole subtree', () => {
    expect(summary([[dir('d'), dir('d/e'), file('d/e/f')], [file('d')]])).toEqual(['1:d:file']);
  });

  it('an upper entry below a path a lower layer holds as a file replaces that file', () => {
    // the upper layer's tree has a directory `p` even if its manifest omits it
    expect(summary([[file('p'), file('q')], [file('p/child')]])).toEqual(['1:p/child:file', '0:q:file']);
  });

  it('keeps a hardlink group working when the upper layer replaces the group file', () => {
    const out = stack([[file('a', 'shared'), hard('b', 'a'), hard('c', 'a')], [file('a', 'new')]]);
    expect(out.map((s) => [s.layer, s.entry])).toEqual([
      [1, file('a', 'new')],
      [0, file('b', 'shared')],
      [0, hard('c', 'b')],
    ]);
  });

  it('drops hardlinks that are themselves deleted, keeping the group file', () => {
    expect(summary([[file('a'), hard('b', 'a')], [wh('b')]])).toEqual(['0:a:file']);
  });

  it('re-roots a hardlink group whose file sat in a deleted directory', () => {
    expect(summary([[dir('d'), file('d/t'), hard('e', 'd/t'), hard('f', 'd/t')], [wh('d')]])).toEqual(['0:e:file', '0:f:hardlink>e']);
  });

  it('rejects a layer whose hardlink names no earlier file of that layer', () => {
    expect(() => stack([[file('a')], [hard('b', 'a')]])).toThrow(InvalidInputError);
  });

  it('orders the output canonically (byte-wise), not by layer', () => {
    expect(
      stack([
        [file('b'), file('a-c')],
        [dir('a'), file('a/x')],
      ]).map((s) => s.entry.path),
    ).toEqual(['a', 'a-c', 'a/x', 'b']);
  });
});
