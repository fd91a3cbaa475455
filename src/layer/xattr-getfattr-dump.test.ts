import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NotFoundError } from '../errors.js';
import { captureLayer } from './capture.js';
import { sh, tempDir } from '../../test/helpers/capture-util.js';
import { GetfattrParser, readTreeXattrs, type Xattrs } from './xattr.js';

describe('getfattr dump parsing', () => {
  it('unescapes octal names, skips the root, keeps empty values and drops overlay bookkeeping', () => {
    const got = new Map<string, Xattrs>();
    const p = new GetfattrParser('/r', (path, attrs) => got.set(path, attrs));
    const dump = [
      '# file: /r',
      'user.overlay.impure="y"',
      '',
      '# file: /r/a\\134b\\012c',
      'user.k=0sdg==',
      'user.empty=0s',
      'trusted.overlay.origin=0sAAAA',
      'trusted.overlay.opaque=0seQ==',
      '',
      '# file: /r/only-noise',
      'user.overlay.impure=0seQ==',
      '',
      '',
    ].join('\n');
    // fed in awkward pieces, as a pipe delivers it
    const bytes = Buffer.from(dump, 'latin1');
    for (let i = 0; i < bytes.length; i += 5) p.push(bytes.subarray(i, i + 5));
    p.end();
    expect([...got.keys()]).toEqual([Buffer.from('a\\b\nc').toString('latin1')]);
    expect(got.get(Buffer.from('a\\b\nc').toString('latin1'))).toEqual({ 'user.k': 'dg==', 'user.empty': '', 'trusted.overlay.opaque': 'eQ==' });
  });
});

describe('reading a real tree', () => {
  const t = tempDir('xattr');
  afterAll(() => t.cleanup());

  it('files attributes under the raw bytes of non-UTF-8 names', async () => {
    const root = join(t.dir, 'tree');
    mkdirSync(root);
    const name = Buffer.from([0x6e, 0xe9, 0x0a, 0x5c]); // latin1 é, newline, backslash
    writeFileSync(Buffer.concat([Buffer.from(`${root}/`), name]), '');
    sh(`cd ${root} && for f in n*; do setfattr -n user.v -v 1 -- "$f"; done && mkdir sub && ln -s nowhere sub/dangling`);
    const m = await readTreeXattrs(root, t.dir);
    expect(m.take(Buffer.from('a'))).toBeUndefined(); // sorts before the name
    expect(m.take(name)).toEqual({ 'user.v': Buffer.from('1').toString('base64') });
    expect(m.take(Buffer.from('sub/dangling'))).toBeUndefined();
    m.close();
  });

  it('capture of a missing root says so', async () => {
    await expect(captureLayer(join(t.dir, 'missing'), { manifestPath: join(t.dir, 'm') })).rejects.toBeInstanceOf(NotFoundError);
  });
});
