import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { captureAndRead, sh, tempDir } from '../../test/helpers/capture-util.js';

/*
 * A real overlayfs: files deleted, a directory removed and recreated (opaque), a file modified
 * (copied up), a file added; then the upper dir is captured. Once as root (trusted.overlay.*
 * xattrs) and once in a user namespace with `userxattr` (user.overlay.*), as the rootless
 * sandbox mounts it.
 */
const CHANGES = `
  rm merged/a/file1
  rm -r merged/b
  rm -r merged/d && mkdir merged/d && printf z > merged/d/z
  printf modified > merged/c/keep
  printf added > merged/newfile
  setfattr -n user.tag -v t merged/newfile
`;

describe.each([
  { name: 'as root (trusted.overlay.*)', wrap: (s: string) => s, opts: '' },
  {
    name: 'in a user namespace with userxattr (user.overlay.*)',
    wrap: (s: string) => `unshare --user --map-root-user --mount bash -euo pipefail -c '${s}'`,
    opts: ',userxattr',
  },
])('capture of a real overlayfs upper dir $name', ({ wrap, opts }) => {
  const t = tempDir('ovl');
  afterAll(() => {
    sh(`umount ${t.dir}/merged 2>/dev/null || true`);
    t.cleanup();
  });

  it('records deletions as whiteouts, a recreated dir as opaque, and no overlay xattrs', async () => {
    sh(
      `cd ${t.dir} && mkdir lower upper work merged
       mkdir -p lower/a lower/b/deep lower/c lower/d
       printf 1 > lower/a/file1; printf 2 > lower/a/file2; printf x > lower/b/deep/x; printf k > lower/c/keep; printf y > lower/d/y`,
    );
    const mount = `mount -t overlay overlay -o lowerdir=lower,upperdir=upper,workdir=work${opts} merged`;
    sh(`cd ${t.dir} && ${wrap(`${mount}\n${CHANGES}\numount merged`)}`);
    const c = await captureAndRead(join(t.dir, 'upper'), join(t.dir, 'm'), { overlayUpper: true });
    const kinds = c.list.map((e) => `${e.path}:${e.type}${e.type === 'dir' && e.opaque === true ? ':opaque' : ''}`);
    expect(kinds).toEqual(['a:dir', 'a/file1:whiteout', 'b:whiteout', 'c:dir', 'c/keep:file', 'd:dir:opaque', 'd/z:file', 'newfile:file']);
    expect(c.byPath.get('c/keep')).toMatchObject({ digest: sha256('modified') });
    expect(c.byPath.get('newfile')).toMatchObject({ xattrs: { 'user.tag': Buffer.from('t').toString('base64') } });
    for (const e of c.list) {
      if ('xattrs' in e && e.xattrs !== undefined) expect(Object.keys(e.xattrs).filter((k) => k.includes('overlay'))).toEqual([]);
    }
  });
});

describe('capture of overlay metadata made by hand', () => {
  const t = tempDir('ovlx');
  afterAll(() => t.cleanup());

  it('reads xattr whiteouts and opaque markers in both namespaces, ignoring the x (xwhiteouts) value', async () => {
    const root = join(t.dir, 'up');
    mkdirSync(root);
    sh(
      `cd ${root}
       : > wh-user && setfattr -n user.overlay.whiteout -v y wh-user
       : > wh-trusted && setfattr -n trusted.overlay.whiteout -v y wh-trusted
       mkdir op-user && setfattr -n user.overlay.opaque -v y op-user
       mkdir op-trusted && setfattr -n trusted.overlay.opaque -v y op-trusted
       mkdir xw && setfattr -n user.overlay.opaque -v x xw
       mknod cdev c 0 0
       mkdir plain && setfattr -n trusted.overlay.impure -v y plain`,
    );
    const c = await captureAndRead(root, join(t.dir, 'm'), { overlayUpper: true });
    expect(c.list.map((e) => `${e.path}:${e.type}${e.type === 'dir' && e.opaque === true ? ':opaque' : ''}`)).toEqual([
      'cdev:whiteout',
      'op-trusted:dir:opaque',
      'op-user:dir:opaque',
      'plain:dir',
      'wh-trusted:whiteout',
      'wh-user:whiteout',
      'xw:dir',
    ]);
    expect(c.byPath.get('plain')).not.toHaveProperty('xattrs');
    // without overlayUpper the same tree is plain files and a 0/0 device
    const plain = await captureAndRead(root, join(t.dir, 'm2'));
    expect(plain.byPath.get('cdev')).toMatchObject({ type: 'char', major: 0, minor: 0 });
    expect(plain.byPath.get('wh-user')).toMatchObject({ type: 'file' });
    expect(plain.byPath.get('op-user')).not.toHaveProperty('opaque');
  });

  it('refuses redirect and metacopy metadata, which a layer cannot express', async () => {
    const root = join(t.dir, 'redir');
    mkdirSync(root);
    sh(`cd ${root} && mkdir moved && setfattr -n trusted.overlay.redirect -v /orig moved`);
    const err = await captureAndRead(root, join(t.dir, 'm3'), { overlayUpper: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as Error).message).toMatch(/"moved" carries overlayfs redirect/);
  });
});
