/**
 * A layer may hold `work/task.txt` without an entry for `work/`: the OCI layer format allows
 * implicit parents, and umoci and containerd make them. Such images import, pull, run and export
 * as `umoci unpack` gives them: an implicit parent keeps the attributes the same directory has in
 * the layers below it (the nearest that has it: a 1777 /tmp, a 0700 home owned by its user, with
 * its xattrs), and only where no layer below has it gets what a runtime gives a missing parent,
 * 0755 root:root. podman 4.3 (containers/storage) gives every implicit parent 0755 root:root over
 * the lower one, so it is no reference here. A layer converted once is shared by the images that
 * hold it, each with the attributes of its own layers below.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeWorkDir, umociUnpack } from '../../test/helpers/images.js';
import { type RawTarEntry, tarOf, writeLayout } from '../../test/helpers/oci-layout.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { type NodeInfo, snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { EnvConfigSchema } from '../layer/env.js';
import { readJsonBlob } from '../registry/blobs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { importImage } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-implicit-parents-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
afterAll(() => removeWorkDir(work));
const layout = join(work, 'layout');
const ms = (...args: string[]): ReturnType<typeof runCli> => runCli(['--json', '--registry', join(work, 'registry'), '--store', join(work, 'store'), ...args]);

const T = new Date(1_600_000_000_000);
const file = (name: string, data = name): RawTarEntry => ({ name, type: 'file', mode: 0o644, mtime: T, data });
const dir = (name: string, mode: number, uid = 0, gid = uid, pax?: Record<string, string>): RawTarEntry => ({
  name,
  type: 'directory',
  mode,
  uid,
  gid,
  mtime: T,
  ...(pax === undefined ? {} : { pax }),
});

/** The layer both images share: every parent of its entries is implicit. */
const top: RawTarEntry[] = [
  file('tmp/t.txt'), // below: 1777 root
  file('home/app/a.txt'), // nested, below: home 0755, home/app 0700 1000:1001 with an xattr
  { name: 'home/app/.wh.old', type: 'file', data: '' }, // a whiteout beside them
  file('new/deep/er/f.txt'), // nested, nowhere below: the runtime's 0755 root:root
  { name: 'opq/.wh..wh..opq', type: 'file', data: '' }, // an opaque marker in an implicit dir
  file('opq/new'),
  { name: '.wh.gone', type: 'file', data: '' }, // deleted below, then an implicit dir again
  file('gone/new'),
  file('srv/www/index.html'), // srv: the middle layer's, nearer than the base's
];

/** Dirs umoci makes fresh in each image (mtime: now), which the conversion gives mtime 0: compared without it. */
const FRESH = {
  one: ['new', 'new/deep', 'new/deep/er', 'gone', 'srv/www'],
  two: ['new', 'new/deep', 'new/deep/er', 'gone', 'home', 'home/app', 'srv', 'srv/www'],
};

/**
 * umoci restores the time of an entry's own parent only: making `srv/www` gives `srv` the time of
 * the unpack. The conversion keeps the time below (as containerd, which copies it): compared without it.
 */
const TOUCHED = { one: ['srv'], two: [] };

function comparable(t: Record<string, NodeInfo>, image: keyof typeof FRESH): Record<string, NodeInfo> {
  for (const p of FRESH[image]) {
    expect(t[p], p).toMatchObject({ type: 'dir', mode: '755', uid: 0, gid: 0 });
    t[p] = { ...t[p]!, mtimeNs: 'fresh' };
  }
  for (const p of TOUCHED[image]) t[p] = { ...t[p]!, mtimeNs: 'touched' };
  return t;
}

/** A directory's mode as `ls -l` shows it. */
function lsMode(octal: string): string {
  const m = Number.parseInt(octal, 8);
  const bits = [...'rwxrwxrwx'].map((c, i) => ((m >> (8 - i)) & 1 ? c : '-'));
  if (m & 0o4000) bits[2] = bits[2] === 'x' ? 's' : 'S';
  if (m & 0o2000) bits[5] = bits[5] === 'x' ? 's' : 'S';
  if (m & 0o1000) bits[8] = bits[8] === 'x' ? 't' : 'T';
  return `d${bits.join('')}`;
}

let oneTree: Record<string, NodeInfo>;
let twoTree: Record<string, NodeInfo>;

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  mkdirSync(join(root, 'home/app'), { recursive: true });
  writeFileSync(join(root, 'home/app/old'), 'deleted above\n');
  chmodSync(join(root, 'home/app'), 0o700);
  chownSync(join(root, 'home/app'), 1000, 1001);
  execFileSync('setfattr', ['-n', 'user.k', '-v', 'v', join(root, 'home/app')]);
  for (const [d, mode, id] of [
    ['opq', 0o750, 7],
    ['gone', 0o700, 7],
    ['srv', 0o755, 0],
  ] as const) {
    mkdirSync(join(root, d));
    writeFileSync(join(root, d, 'old'), 'below\n');
    chmodSync(join(root, d), mode);
    chownSync(join(root, d), id, id + 1);
  }
  execFileSync('tar', ['-C', root, '--numeric-owner', '--xattrs', '--xattrs-include=*', '-cf', join(work, 'base.tar'), '.']);
  const base = readFileSync(join(work, 'base.tar'));
  const middle = await tarOf([dir('srv/', 0o711, 5)]);
  const topTar = await tarOf(top);
  // the same top layer over other layers below: tmp 0770 owned by 9, no home at all
  const other = await tarOf([dir('tmp/', 0o770, 9), dir('opq/', 0o755, 3, 3, { 'SCHILY.xattr.user.o': 'x' })]);
  const plain = (t: Buffer): { blob: Buffer; tar: Buffer } => ({ blob: t, tar: t });
  writeLayout(layout, [
    { tag: 'one', layers: [plain(base), plain(middle), plain(topTar)] },
    { tag: 'two', layers: [plain(other), plain(topTar)] },
  ]);
  oneTree = comparable(snapshotTree(umociUnpack(layout, 'one', join(work, 'umoci-one'))), 'one');
  twoTree = comparable(snapshotTree(umociUnpack(layout, 'two', join(work, 'umoci-two'))), 'two');
}, 120_000);

describe('implicit parent directories', () => {
  it('(umoci gives them the attributes below, or 0755 root:root)', () => {
    expect(oneTree['tmp']).toMatchObject({ mode: '1777', uid: 0 });
    expect(oneTree['home/app']).toMatchObject({ mode: '700', uid: 1000, gid: 1001, xattrs: { 'user.k': '0x76' } });
    expect(oneTree['home/app/old']).toBeUndefined();
    expect(oneTree['new/deep']).toMatchObject({ mode: '755', uid: 0, gid: 0 });
    expect(oneTree['opq']).toMatchObject({ mode: '750', uid: 7, gid: 8 });
    expect(oneTree['opq/old']).toBeUndefined();
    expect(oneTree['gone']).toMatchObject({ mode: '755', uid: 0 });
    expect(oneTree['srv']).toMatchObject({ mode: '711', uid: 5 });
    expect(twoTree['tmp']).toMatchObject({ mode: '770', uid: 9 });
    expect(twoTree['home/app']).toMatchObject({ mode: '755', uid: 0 });
  });

  it('import, pull, run and export give what umoci unpacks', async () => {
    const imported = await ms('import', `oci:${layout}:one`, '--tag', 'img/one');
    expect(imported.code, imported.stderr).toBe(0);
    const pulled = await ms('pull', 'img/one');
    expect(pulled.code, pulled.stderr).toBe(0);
    // ls in the sandbox shows the dirs with umoci's mode and owner (its root has no capabilities:
    // what it may list of them their modes say)
    const dirs = ['gone', 'home', 'home/app', 'new', 'new/deep', 'opq', 'srv', 'srv/www', 'tmp']; // as ls sorts them
    const ran = await ms('run', 'img/one', '--', 'ls', '-land', ...dirs.map((d) => `/${d}`));
    const result = JSON.parse(ran.stdout) as { exitCode: number; stdout: string; stderr: string };
    expect([ran.code, result.exitCode], result.stderr).toEqual([0, 0]);
    const shown = result.stdout
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .map((f) => [f[f.length - 1], f[0], Number(f[2]), Number(f[3])]);
    expect(shown).toEqual(dirs.map((d) => [`/${d}`, lsMode(oneTree[d]!.mode), oneTree[d]!.uid, oneTree[d]!.gid]));
    expect(shown).toContainEqual(['/tmp', 'drwxrwxrwt', 0, 0]);
    expect(shown).toContainEqual(['/home/app', 'drwx------', 1000, 1001]);
    const out = join(work, 'export-one');
    const exported = await ms('export', 'img/one', out);
    expect(exported.code, exported.stderr).toBe(0);
    expect(comparable(snapshotTree(out), 'one')).toEqual(oneTree);
  }, 120_000);

  it('a layer shared by two images is converted once and takes each image’s attributes below', async () => {
    const reg = new LocalRegistry(join(work, 'registry'));
    const store = new StorePaths(join(work, 'store'));
    const one = await importImage(reg, store, `oci:${layout}:one`, {}); // present, if the test above ran
    const two = await importImage(reg, store, `oci:${layout}:two`, { tag: 'img/two' });
    expect(two.layers.map((l) => l.converted)).toEqual([true, false]);
    // one conversion, two manifests of it: the same packs under each image's attributes
    expect(two.layers[1]!.diffId).toBe(one.layers[2]!.diffId);
    expect(two.layers[1]!.layer).not.toBe(one.layers[2]!.layer);
    const [envOne, envTwo] = await Promise.all([one.env, two.env].map((d) => readJsonBlob(reg, d, EnvConfigSchema, 'env')));
    expect(envTwo!.layers[1]!.packs).toEqual(envOne!.layers[2]!.packs);
    const out = join(work, 'export-two');
    const exported = await ms('export', 'img/two', out);
    expect(exported.code, exported.stderr).toBe(0);
    expect(comparable(snapshotTree(out), 'two')).toEqual(twoTree);
  }, 120_000);
});
