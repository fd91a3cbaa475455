/**
 * Issue 25: on a full disk, `verify` reported the store's ENOSPC as a damaged registry pack, and
 * an import's ENOSPC named no path ("ENOSPC: no space left on device, write"). A write that fails
 * for its disk is a LOCAL_DISK error saying whose disk is full and where; verify stops there
 * instead of condemning good packs, and the same registry verifies clean with room to work. Each
 * case fills a tmpfs of 1 MiB the test mounts and removes (root only).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { mountTmpfs, type SmallFs, smallFsUnavailable } from '../../test/helpers/small-fs.js';
import { importImage } from '../image/import.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';

const work = mkdtempSync(join(tmpdir(), 'ms-full-disk-'));
const skip = smallFsUnavailable();
const mounts: SmallFs[] = [];
let layout: string;
let n = 0;

/** A file system of 1 MiB, smaller than the 3 MiB file each case writes. */
function tiny(): string {
  const fs = mountTmpfs(join(work, `tiny-${n++}`), 1 << 20);
  mounts.push(fs);
  return fs.dir;
}

beforeAll(async () => {
  const t = await makeTar([{ name: 'big.bin', data: randomBytes(3 << 20).toString('latin1') }]);
  layout = join(work, 'layout');
  writeLayout(layout, [{ layers: [{ blob: t, tar: t }] }]);
});
afterAll(() => {
  for (const m of mounts) m.remove();
  rmSync(work, { recursive: true, force: true });
});

describe.skipIf(skip !== undefined)(`a full disk${skip === undefined ? '' : ` (skipped: ${skip})`}`, () => {
  it("verify says the store's disk is full at its scratch dir, and reports no bad pack", async () => {
    mkdirSync(join(work, 'tree'));
    writeFileSync(join(work, 'tree', 'big.bin'), randomBytes(3 << 20));
    const registry = join(work, 'verify-registry');
    await pushTree(new LocalRegistry(registry), new StorePaths(join(work, 'push-store')), join(work, 'tree'), { tag: 'v/good' });
    const store = tiny();
    const full = await runCli(['--json', '--registry', registry, '--store', store, 'verify', '--no-store']);
    expect(full.code).toBe(1);
    const { error } = JSON.parse(full.stdout) as { error: { code: string; message: string; hint: string } };
    expect(error.code).toBe('LOCAL_DISK');
    expect(error.message).toMatch(new RegExp(`^the store's disk is full at ${store}/tmp/verify-\\w+ \\(ENOSPC`));
    expect(error.hint).toMatch(/free space/);
    expect(full.stdout).not.toMatch(/bad-pack/);
    // with room to work, the same registry is sound
    const roomy = await runCli(['--json', '--registry', registry, '--store', join(work, 'roomy-store'), 'verify', '--no-store']);
    expect(roomy.code, roomy.stdout).toBe(0);
  });

  it("an import whose store is full names the store's path it was writing; a rerun with room imports", async () => {
    const reg = new LocalRegistry(join(work, 'import-registry'));
    const store = tiny();
    await expect(importImage(reg, new StorePaths(store), `oci:${layout}`, { tag: 'i/full' })).rejects.toMatchObject({
      code: 'LOCAL_DISK',
      message: expect.stringMatching(new RegExp(`^the store's disk is full at ${store}/tmp/image-[\\w-]+.* \\(ENOSPC`)),
    });
    expect(await reg.getRef('i/full')).toBeNull();
    const again = await importImage(reg, new StorePaths(join(work, 'import-store')), `oci:${layout}`, { tag: 'i/full' });
    expect(again.status).toBe('imported');
  });

  it("an import whose registry is full names the registry's path", async () => {
    const at = tiny();
    const reg = new LocalRegistry(join(at, 'registry'));
    await expect(importImage(reg, new StorePaths(join(work, 'store-for-full-registry')), `oci:${layout}`, { tag: 'i/reg' })).rejects.toMatchObject({
      code: 'LOCAL_DISK',
      message: expect.stringMatching(new RegExp(`^the registry's disk is full at ${at}/registry/tmp/[\\w-]+ \\(ENOSPC`)),
    });
  });
});
