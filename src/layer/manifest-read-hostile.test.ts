import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { MinisandboxError } from '../errors.js';
import { readManifest } from './manifest-read.js';
import { MANIFEST_HEADER, type Entry } from './manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';

const HEADER = `${canonicalJson(MANIFEST_HEADER)}\n`;
const meta = { mode: 0o644, uid: 0, gid: 0, mtime: '0' };
const file = (path: string): Entry => ({ type: 'file', path, ...meta, size: 1, digest: sha256('x') });
const dir = (path: string): Entry => ({ type: 'dir', path, ...meta, mode: 0o755 });
const link = (path: string, target: string): Entry => ({ type: 'symlink', path, ...meta, target });
const hard = (path: string, target: string): Entry => ({ type: 'hardlink', path, target });
const lines = (...es: Entry[]): string => HEADER + es.map((e) => `${canonicalJson(e)}\n`).join('');

async function read(text: string | Buffer, chunk = 7): Promise<Entry[]> {
  // small chunks so lines straddle chunk boundaries, as they do in real streams
  const buf = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  const parts: Buffer[] = [];
  for (let i = 0; i < buf.length; i += chunk) parts.push(buf.subarray(i, i + chunk));
  const out: Entry[] = [];
  for await (const e of readManifest(Readable.from(parts), 'layer sha256:test')) out.push(e);
  return out;
}

async function rejection(text: string | Buffer): Promise<string> {
  const err = await read(text).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MinisandboxError);
  return (err as Error).message;
}

describe('readManifest on well-formed manifests', () => {
  it('yields every entry of a valid manifest, whatever the chunking', async () => {
    const text = lines(dir('a'), file('a-c'), file('a/b'), hard('a/c', 'a/b'), link('l', '/etc/passwd'), { type: 'whiteout', path: 'w' });
    for (const chunk of [1, 3, 64, 1 << 20]) expect((await read(text, chunk)).map((e) => e.path)).toEqual(['a', 'a-c', 'a/b', 'a/c', 'l', 'w']);
  });

  it('accepts a name that extends a symlink name with a byte below `/`', async () => {
    // `l` is a symlink, `l-x/y` and `l.d/z` are not below it
    expect(await read(lines(link('l', 'x'), dir('l-x'), file('l-x/y'), dir('l.d'), file('l.d/z')))).toHaveLength(5);
  });
});

describe('readManifest rejects hostile or broken manifests, naming the entry', () => {
  it('absolute path', async () => {
    expect(await rejection(lines(file('/etc/passwd')))).toMatch(/"\/etc\/passwd": absolute path/);
  });

  it('`..` component', async () => {
    expect(await rejection(lines(dir('a'), file('a/../../etc/shadow')))).toMatch(/`\.\.` component/);
  });

  it('path through a symlink', async () => {
    expect(await rejection(lines(link('a', '/etc'), file('a/passwd')))).toMatch(/"a\/passwd".*parent "a" is not a directory/);
  });

  it('path through a symlink further up, after unrelated siblings', async () => {
    expect(await rejection(lines(link('a', '/'), file('a-b'), dir('a.c'), file('a/x/y')))).toMatch(/"a\/x\/y".*parent "a"/);
  });

  it('path below a regular file or a whiteout', async () => {
    expect(await rejection(lines(file('f'), file('f/g')))).toMatch(/"f\/g"/);
    expect(await rejection(lines({ type: 'whiteout', path: 'w' }, file('w/g')))).toMatch(/"w\/g"/);
  });

  it('an entry whose parent the layer has no directory entry for (the lay-out makes no directory)', async () => {
    expect(await rejection(lines(file('work/task.txt')))).toMatch(/"work\/task.txt": its parent "work" is not a directory entry of this layer/);
    expect(await rejection(lines(dir('a'), file('a-b'), dir('a/b/c')))).toMatch(/"a\/b\/c": its parent "a\/b"/);
    expect(await rejection(lines(dir('a'), file('a/f'), { type: 'whiteout', path: 'w/x' }))).toMatch(/"w\/x": its parent "w"/);
    // parents found once per run of siblings, and again after a sibling of theirs
    expect(await read(lines(dir('a'), file('a/f'), dir('a/g'), file('a/g/x'), file('a/h'), file('b')))).toHaveLength(6);
  });

  it('hardlink to outside the layer', async () => {
    expect(await rejection(lines(hard('h', '../../etc/shadow')))).toMatch(/`\.\.` component/);
    expect(await rejection(lines(hard('h', '/etc/shadow')))).toMatch(/absolute path/);
  });

  it('hardlink to a target that does not exist, comes later, or is not a file', async () => {
    expect(await rejection(lines(hard('h', 'missing')))).toMatch(/"h".*"missing" is not an earlier file entry/);
    expect(await rejection(lines(hard('a', 'b'), file('b')))).toMatch(/"a".*"b" is not an earlier file entry/);
    expect(await rejection(lines(link('a', '/etc/shadow'), hard('b', 'a')))).toMatch(/"b".*"a" is not an earlier file entry/);
    expect(await rejection(lines(dir('a'), hard('b', 'a')))).toMatch(/"b".*"a" is not an earlier file entry/);
  });

  it('out of order and duplicate entries', async () => {
    expect(await rejection(lines(file('b'), file('a')))).toMatch(/"a" is out of order or duplicated/);
    expect(await rejection(lines(file('a'), file('a')))).toMatch(/"a" is out of order or duplicated/);
    // a dir's contents before a sibling that sorts before `/`
    expect(await rejection(lines(dir('a'), file('a/b'), file('a-c')))).toMatch(/"a-c" is out of order/);
  });

  it('truncated: no final newline, or no header', async () => {
    const full = lines(file('a'), file('b'));
    expect(await rejection(full.slice(0, -1))).toMatch(/truncated manifest: line 3 has no final newline/);
    expect(await rejection(full.slice(0, -5))).toMatch(/truncated manifest/);
    expect(await rejection(full.slice(HEADER.length))).toMatch(/line 1 is not the layer manifest header/);
    expect(await rejection('')).toMatch(/empty manifest/);
  });

  it('non-canonical JSON, unknown fields and invalid UTF-8', async () => {
    expect(await rejection(`${HEADER}{"type":"file","path":"a","mode":420,"uid":0,"gid":0,"mtime":"0","size":1,"digest":"${sha256('x')}"}\n`)).toMatch(
      /"a" is not in canonical form/,
    );
    expect(await rejection(`${HEADER}${canonicalJson({ ...file('a'), extra: 1 })}\n`)).toMatch(/line 2/);
    expect(await rejection(Buffer.concat([Buffer.from(HEADER), Buffer.from([0x7b, 0xff, 0x7d, 0x0a])]))).toMatch(/line 2: not valid UTF-8/);
  });
});
