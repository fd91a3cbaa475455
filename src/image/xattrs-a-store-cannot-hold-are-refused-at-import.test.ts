/**
 * Issue 25: a 60 KB xattr was imported, and then every pull failed with a misleading "check free
 * space" (ext4 answers an attribute too large for its block with ENOSPC). Import and pull now
 * agree on one rule (layer/xattr-room.ts: all of a file's attributes in one 4 KiB ext4 block):
 * what an import accepts lays out on a fresh ext4, one byte more is refused at import naming the
 * layer path and the attribute, and a layer made elsewhere (captured from a tmpfs, which takes
 * 64 KiB) fails its lay-out naming the attribute, its size and its path instead of the disk.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { mountExt4, mountTmpfs, type SmallFs, smallFsUnavailable } from '../../test/helpers/small-fs.js';
import { XATTR_ROOM } from '../layer/xattr-room.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { pullEnv } from '../store/pull.js';
import { StorePaths } from '../store/paths.js';
import { importImage } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-image-xattrs-'));
const skip = smallFsUnavailable();
let ext4: SmallFs | undefined;
let n = 0;

beforeAll(() => {
  // the store on an ext4 of its own with 4 KiB blocks: the file system the rule is made for
  if (skip === undefined) ext4 = mountExt4(join(work, 'ext4'), 32);
});
afterAll(() => {
  ext4?.remove();
  rmSync(work, { recursive: true, force: true });
});

function fresh(): { reg: LocalRegistry; store: StorePaths } {
  n++;
  return { reg: new LocalRegistry(join(work, `reg-${n}`)), store: new StorePaths(join(ext4?.dir ?? work, `store-${n}`)) };
}

/** Imports an image of one file `f` with these attributes (values as latin1 text). */
async function importWith(xattrs: Record<string, string>, at = fresh()): Promise<{ reg: LocalRegistry; store: StorePaths }> {
  const pax = Object.fromEntries(Object.entries(xattrs).map(([k, v]) => [`SCHILY.xattr.${k}`, v]));
  const t = await makeTar([{ name: 'f', data: 'x\n', pax }]);
  const dir = join(work, `layout-${n}`);
  writeLayout(dir, [{ layers: [{ blob: t, tar: t }] }]);
  await importImage(at.reg, at.store, `oci:${dir}`, { tag: 'x/attrs' });
  return at;
}

describe.skipIf(skip !== undefined)(`xattrs a store cannot hold${skip === undefined ? '' : ` (skipped: ${skip})`}`, () => {
  it('attributes that fill the rule exactly import, pull and are laid out on ext4', async () => {
    // one attribute: 16 + 4 (name "x") + value; two: 16 + 4 + 2000 and 16 + 4 + 2020
    const sets: Record<string, string>[] = [{ 'user.x': 'a'.repeat(XATTR_ROOM - 20) }, { 'user.a': 'a'.repeat(2000), 'user.b': 'b'.repeat(XATTR_ROOM - 2040) }];
    for (const attrs of sets) {
      const { reg, store } = await importWith(attrs);
      const pulled = await pullEnv(reg, store, 'x/attrs');
      const dump = execFileSync('getfattr', ['-d', '-m', '^user\\.', '--absolute-names', join(pulled.layerDirs[0]!, 'f')], { encoding: 'utf8' });
      for (const [k, v] of Object.entries(attrs)) expect(dump).toContain(`${k}="${v}"`);
    }
  });

  it.each([
    ['one byte past the rule', { 'user.x': 'a'.repeat(XATTR_ROOM - 19) }, /extended attribute user\.x \(4041 bytes\) does not fit: .* take 4064 bytes/],
    ['two that do not fit together', { 'user.a': 'a'.repeat(2000), 'user.b': 'b'.repeat(XATTR_ROOM - 2039) }, /user\.b \(2021 bytes\) does not fit/],
    ['60 KB', { 'user.big': 'a'.repeat(60_000) }, /user\.big \(60000 bytes\) does not fit/],
    ['a name past 255 bytes', { [`user.${'n'.repeat(251)}`]: 'v' }, /name "user\.n+"\.\.\. is longer than 255 bytes/],
  ])('%s is refused at import naming the layer path and the attribute', async (_what, attrs, message) => {
    const { reg } = fresh();
    const err = await importWith(attrs, { reg, store: new StorePaths(join(work, `store-refused-${n}`)) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(message), hint: expect.stringMatching(/setfattr -x/) });
    expect((err as Error).message).toMatch(/^layer 1\/1 \(\w+\) of oci:.*: "f": /);
    expect(await reg.getRef('x/attrs')).toBeNull();
  });

  it('a layer made elsewhere with a 60 KB attribute fails its lay-out naming it, not the disk', async () => {
    const tmpfs = mountTmpfs(join(work, 'tmpfs'), 8 << 20);
    try {
      mkdirSync(join(tmpfs.dir, 'tree'));
      writeFileSync(join(tmpfs.dir, 'tree', 'big'), 'x\n');
      execFileSync('setfattr', ['-n', 'user.big', '-v', 'a'.repeat(60_000), join(tmpfs.dir, 'tree', 'big')]);
      const { reg, store } = fresh();
      await pushTree(reg, new StorePaths(join(work, `push-store-${n}`)), join(tmpfs.dir, 'tree'), { tag: 'x/elsewhere' });
      await expect(pullEnv(reg, store, 'x/elsewhere')).rejects.toMatchObject({
        code: 'FS_METADATA',
        message: expect.stringMatching(/did not take extended attribute user\.big \(60000 bytes\) of \/.*\/big: No space left on device/),
        hint: expect.stringMatching(/one block/),
      });
    } finally {
      tmpfs.remove();
    }
  });
});
