import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, truncateSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compress } from 'zstd-napi';
import { asRemote } from '../../test/helpers/remote-registry.js';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { type Digest, digestHex, sha256 } from '../cas/digest.js';
import { ENV_MEDIA_TYPE, type EnvConfig } from '../layer/env.js';
import { MANIFEST_HEADER } from '../layer/manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { putJsonBlob } from '../registry/blobs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';
import { type PullOptions, pullEnv } from './pull.js';
import { pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';

const work = mkdtempSync(join(tmpdir(), 'ms-bad-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
/** A fresh registry holding one pushed random tree, tagged `t/x`. */
async function freshRegistry(): Promise<{ reg: LocalRegistry; env: EnvConfig }> {
  const dir = join(work, `case-${n++}`);
  const reg = new LocalRegistry(join(dir, 'registry'));
  const src = join(dir, 'src');
  makeRandomTree(src, 7, 120);
  await pushTree(reg, new StorePaths(join(dir, 'push-store')), src, { tag: 't/x' });
  return { reg, env: (await resolveEnv(reg, 't/x')).config };
}

/** A registry holding one 24 MiB object that does not compress: its frame is over 16 MiB compressed, so it is read as a stream. */
async function bigObjectRegistry(): Promise<{ reg: LocalRegistry; big: Buffer; pack: string; dir: string }> {
  const dir = join(work, `case-${n++}`);
  const reg = new LocalRegistry(join(dir, 'registry'));
  const src = join(dir, 'src');
  mkdirSync(src, { recursive: true });
  const big = Buffer.alloc(24 << 20);
  for (let i = 0; i < big.length; i += 4) big.writeUInt32LE((i * 2654435761) >>> 0, i);
  writeFileSync(join(src, 'big.bin'), big);
  await pushTree(reg, new StorePaths(join(dir, 'push-store')), src, { tag: 't/big' });
  const env = (await resolveEnv(reg, 't/big')).config;
  const pack = blobPath(reg, env.layers[0]!.packs[0]!.pack);
  chmodWritable(pack);
  return { reg, big, pack, dir };
}

function blobPath(reg: LocalRegistry, d: Digest): string {
  return join(reg.root, 'blobs', 'sha256', digestHex(d));
}

/** Nothing of the layer became visible: no layer tree, no temp tree left behind. */
function expectNothingLaidOut(store: StorePaths): void {
  const layers = existsSync(store.layersDir) ? readdirSync(store.layersDir) : [];
  expect(layers.filter((n) => !n.endsWith('.lock'))).toEqual([]);
}

function chmodWritable(p: string): void {
  execFileSync('chmod', ['u+w', p]);
}

/**
 * Where a pull may decode frames: the lay-out's helper (the default where it has libzstd) reading
 * local packs, the helper given frames by a remote registry (in records, or spooled to files), or node.
 */
const DECODERS: Array<[string, PullOptions, boolean]> = [
  ['the helper', {}, false],
  ['the helper, from a remote registry', {}, true],
  ['node', { decodeIn: 'node' }, false],
];

describe('a pull from a corrupt or hostile registry fails clearly and lays nothing out', () => {
  it.each(DECODERS)('a flipped byte in a pack is detected and names the object, decoded by %s', async (_decoder, opts, remote) => {
    const { reg, env } = await freshRegistry();
    const pack = env.layers[0]!.packs[0]!.pack;
    const p = blobPath(reg, pack);
    chmodWritable(p);
    const data = readFileSync(p);
    // a run of bytes, so the damage cannot fall only on tar padding the reader never uses
    const mid = Math.floor(data.length / 2);
    for (let i = mid; i < Math.min(data.length, mid + 64); i++) data[i] = data[i]! ^ 0xff;
    writeFileSync(p, data);
    const store = new StorePaths(join(work, `s-${n++}`));
    await expect(pullEnv(remote ? asRemote(reg) : reg, store, 't/x', opts)).rejects.toThrow(/sha256:[0-9a-f]{64}/);
    expectNothingLaidOut(store);
  });

  it.each(DECODERS)('a pack cut short is a corrupt pack naming objects it lost, decoded by %s', async (_decoder, opts, remote) => {
    const { reg, env } = await freshRegistry();
    const pack = env.layers[0]!.packs[0]!.pack;
    const p = blobPath(reg, pack);
    chmodWritable(p);
    truncateSync(p, Math.floor(readFileSync(p).length / 2));
    const store = new StorePaths(join(work, `s-${n++}`));
    const err = await pullEnv(remote ? asRemote(reg) : reg, store, 't/x', opts).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'CORRUPT_PACK' });
    expect(String(err)).toMatch(new RegExp(`pack ${pack}.*truncated pack.*sha256:[0-9a-f]{64}`));
    expectNothingLaidOut(store);
  });

  it.each(DECODERS)("a flipped byte in a large object's own frame (decoded as a stream) names the object, decoded by %s", async (_decoder, opts, remote) => {
    const { reg, big, pack, dir } = await bigObjectRegistry();
    const data = readFileSync(pack);
    const mid = Math.floor(data.length / 2);
    for (let i = mid; i < mid + 64; i++) data[i] = data[i]! ^ 0xff;
    writeFileSync(pack, data);
    const store = new StorePaths(join(dir, 'store'));
    const err = await pullEnv(remote ? asRemote(reg) : reg, store, 't/big', opts).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: expect.stringMatching(/DIGEST_MISMATCH|CORRUPT_PACK/) });
    expect(String(err)).toContain(sha256(big));
    expectNothingLaidOut(store);
  });

  it.each(DECODERS)(
    "a pack cut short inside a large object's own frame (too large to read whole) names the object, decoded by %s",
    async (_decoder, opts, remote) => {
      const { reg, big, pack, dir } = await bigObjectRegistry();
      truncateSync(pack, Math.floor(readFileSync(pack).length / 2));
      const store = new StorePaths(join(dir, 'store'));
      const err = await pullEnv(remote ? asRemote(reg) : reg, store, 't/big', opts).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'CORRUPT_PACK' });
      expect(String(err)).toContain(sha256(big));
      expectNothingLaidOut(store);
    },
  );

  it('a truncated manifest blob is rejected by its digest', async () => {
    const { reg, env } = await freshRegistry();
    const p = blobPath(reg, env.layers[0]!.manifest);
    chmodWritable(p);
    truncateSync(p, 10);
    const store = new StorePaths(join(work, `s-${n++}`));
    await expect(pullEnv(reg, store, 't/x')).rejects.toThrow(/manifest blob of layer .*expected sha256/);
    expectNothingLaidOut(store);
  });

  it('a missing pack blob is reported as not found', async () => {
    const { reg, env } = await freshRegistry();
    rmSync(blobPath(reg, env.layers[0]!.packs[0]!.pack));
    const store = new StorePaths(join(work, `s-${n++}`));
    await expect(pullEnv(reg, store, 't/x')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expectNothingLaidOut(store);
  });

  const meta = { mode: 0o644, uid: 0, gid: 0, mtime: '0' };
  const hostile: Array<[string, object[]]> = [
    ['an absolute path', [{ type: 'dir', path: '/etc', ...meta }]],
    [
      'a `..` component',
      [
        { type: 'dir', path: 'a', ...meta },
        { type: 'symlink', path: 'a/../../escape', target: 'x', ...meta },
      ],
    ],
    [
      'a path through a symlink',
      [
        { type: 'symlink', path: 'a', target: '/etc', ...meta },
        { type: 'fifo', path: 'a/evil', ...meta },
      ],
    ],
    ['a hardlink to outside the layer', [{ type: 'hardlink', path: 'h', target: '../../../etc/shadow' }]],
    ['a hardlink to a path the layer does not have', [{ type: 'hardlink', path: 'h', target: 'nowhere' }]],
    // the lay-out checks hardlink targets itself (the pull's manifest reader leaves it to it)
    [
      'a hardlink to an earlier symlink, not a file',
      [
        { type: 'symlink', path: 'a', target: '/etc/shadow', ...meta },
        { type: 'hardlink', path: 'h', target: 'a' },
      ],
    ],
  ];
  it.each(hostile)('a manifest entry with %s', async (_what, entries) => {
    const dir = join(work, `hostile-${n++}`);
    const reg = new LocalRegistry(join(dir, 'registry'));
    const text = `${canonicalJson(MANIFEST_HEADER)}\n${entries.map((e) => `${canonicalJson(e)}\n`).join('')}`;
    const blob = compress(Buffer.from(text));
    const manifest = sha256(blob);
    await reg.putBlob(manifest, blob);
    const env: EnvConfig = {
      mediaType: ENV_MEDIA_TYPE,
      layers: [{ digest: sha256(text), manifest, packs: [], size: 0, entries: entries.length, objects: 0 }],
      config: { workdir: '/', env: {}, user: { uid: 0, gid: 0 }, hostname: 'sandbox', labels: {} },
    };
    await reg.putRef('evil/x', await putJsonBlob(reg, env));
    const store = new StorePaths(join(dir, 'store'));
    mkdirSync(store.root, { recursive: true });
    await expect(pullEnv(reg, store, 'evil/x')).rejects.toMatchObject({ code: expect.stringMatching(/UNSAFE_PATH|INVALID_INPUT/) });
    expectNothingLaidOut(store);
    expect(existsSync('/escape')).toBe(false);
  });
});

describe('a full disk fails cleanly', () => {
  const mnt = join(work, 'small-fs');
  beforeAll(() => {
    mkdirSync(mnt, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=600k', 'tmpfs', mnt]);
  });
  afterAll(() => {
    execFileSync('umount', ['-l', mnt]);
  });

  it('a pull into a store on a full filesystem errors with ENOSPC and leaves no partial layer', async () => {
    const { reg } = await freshRegistry();
    const store = new StorePaths(join(mnt, 'store'));
    await expect(pullEnv(reg, store, 't/x')).rejects.toMatchObject({ code: expect.stringMatching(/ENOSPC|FS_METADATA/) });
    expectNothingLaidOut(store);
    // and a rerun with room to spare finishes the job
    execFileSync('mount', ['-o', 'remount,size=64m', mnt]);
    const r = await pullEnv(reg, store, 't/x');
    expect(r.layerDirs).toHaveLength(1);
  });
});
