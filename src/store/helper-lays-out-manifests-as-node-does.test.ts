/**
 * The lay-out helper reads and lays out plain manifests itself (native/fsmeta-manifest.c), as
 * node's reader and lay-out do (layer/manifest-read.ts, store/materialize.ts). Both are fed the
 * same valid and mutated manifests: they must accept the same ones and make the same trees
 * (sharing through the same pool), and reject the same ones.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { snapshotTree } from '../../test/helpers/tree-snapshot.js';
import { sha256 } from '../cas/digest.js';
import { MinisandboxError } from '../errors.js';
import { readManifest } from '../layer/manifest-read.js';
import { type Entry, MANIFEST_HEADER } from '../layer/manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { FsmetaStream } from './fsmeta.js';
import { scanFileDigests } from './manifest-scan.js';
import { materialize } from './materialize.js';
import { StorePaths } from './paths.js';

const work = mkdtempSync(join(tmpdir(), 'ms-helper-manifest-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const EMPTY = sha256(Buffer.alloc(0));
const HEADER = canonicalJson(MANIFEST_HEADER);

/** A valid manifest using every entry type, shared and copied contents, from a seed. */
function validManifest(seed: number): string {
  const r = rng(seed);
  const mtime = (): string => String(1600000000000000000 + Math.floor(r() * 3) * 1000000007);
  const meta = (): { mode: number; uid: number; gid: number; mtime: string } => ({
    mode: [0o644, 0o755, 0o4755][Math.floor(r() * 3)]!,
    uid: Math.floor(r() * 2) * 1000,
    gid: 0,
    mtime: mtime(),
  });
  // names in JavaScript's sort order, which is not UTF-8's: U+1F600 (surrogates) before U+E000
  // and names holding the object's own separators
  const xattrs = (): { xattrs?: Record<string, string> } =>
    [
      {},
      { xattrs: { 'user.a': 'eA==', 'user.b': '' } },
      { xattrs: { 'user.\u{1F600}': 'AA==', 'user.\uE000': 'eHk=' } },
      { xattrs: { 'user.a:b,c': 'eA==', 'user.d': 'AA==' } },
    ][Math.floor(r() * 4)]!;
  const file = (path: string): Entry => ({ type: 'file', path, ...meta(), size: 0, digest: EMPTY, ...xattrs() });
  const entries: Entry[] = [
    { type: 'dir', path: 'a', ...meta() },
    { type: 'dir', path: 'a/b', ...meta(), ...(r() < 0.5 ? { opaque: true } : {}), ...xattrs() },
    file('a/b/f'),
    file('a/f'),
    file('a/g'),
    { type: 'hardlink', path: 'a/h', target: r() < 0.5 ? 'a/f' : 'a/b/f' },
    { type: 'symlink', path: 'a/l', ...meta(), target: r() < 0.5 ? '../x' : '/etc/passwd' },
    { type: 'char', path: 'c', ...meta(), major: 1, minor: 3 },
    { type: 'fifo', path: 'p', ...meta() },
    { type: 'whiteout', path: 'w' },
    file('z\u00e9'),
  ];
  entries.sort((x, y) => Buffer.compare(Buffer.from(x.path), Buffer.from(y.path)));
  return `${HEADER}\n${entries.map((e) => `${canonicalJson(e)}\n`).join('')}`;
}

const BYTES = ['"', '\\', '{', '}', ',', ':', '0', '9', '-', '.', '/', 'a', ' ', '\u0000', '\n', '\u00ff', '\u00c3', 't', 'e'];
const NUMBERS = ['9007199254740991', '9007199254740992', '4294967295', '4294967296', '4095', '4096', '00', '01', '1e3', '-1', '1.0', '-0'];
const NAMES = ['..', '.', '/a', 'a//b', 'a/', 'a/../x', 'x/y', 'a/f/x', 'a/l/x', 'c/x'];

/** One random edit of a valid manifest: a byte, a line, or a path. */
function mutate(text: string, r: () => number): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const lines = text.split('\n').slice(0, -1);
  const i = Math.floor(r() * lines.length);
  const line = Buffer.from(lines[i]!, 'latin1');
  const at = Math.floor(r() * line.length);
  const digits = [...line.keys()].filter((k) => line[k]! >= 0x30 && line[k]! <= 0x39);
  switch (Math.floor(r() * 11)) {
    case 10:
      // a number at an edge of some range, or not in canonical form
      lines[i] = lines[i]!.replace(/:(\d+)([,}])/, `:${pick(NUMBERS)}$2`);
      break;
    case 8:
    case 9:
      // a digit for a digit: mostly still valid (other ids, modes, times, devices), sometimes not
      if (digits.length > 0) line[pick(digits)] = 0x30 + Math.floor(r() * 10);
      lines[i] = line.toString('latin1');
      break;
    case 0:
      lines[i] = Buffer.concat([line.subarray(0, at), Buffer.from(pick(BYTES), 'latin1'), line.subarray(at + 1)]).toString('latin1');
      break;
    case 1:
      lines[i] = Buffer.concat([line.subarray(0, at), line.subarray(at + 1)]).toString('latin1');
      break;
    case 2:
      lines[i] = Buffer.concat([line.subarray(0, at), Buffer.from(pick(BYTES), 'latin1'), line.subarray(at)]).toString('latin1');
      break;
    case 3:
      if (i + 1 < lines.length) [lines[i], lines[i + 1]] = [lines[i + 1]!, lines[i]!];
      break;
    case 4:
      lines.splice(i, 0, lines[i]!);
      break;
    case 5:
      lines.splice(i, 1);
      break;
    case 6:
      return text.slice(0, -1);
    default:
      lines[i] = lines[i]!.replace(/"(path|target)":"[^"]*"/, `"$1":${JSON.stringify(pick(NAMES))}`);
  }
  return `${lines.join('\n')}\n`;
}

type Outcome = { tree: unknown } | { code: string };

let n = 0;
/** A store whose pool holds the empty content (with metadata no entry asks for: shared by copies). */
function storeFor(): StorePaths {
  const store = new StorePaths(join(work, `store-${n++}`));
  mkdirSync(store.linksDir, { recursive: true });
  mkdirSync(store.tmpDir, { recursive: true });
  writeFileSync(store.poolPrimary(EMPTY.slice(7)), '', { mode: 0o600 });
  return store;
}

async function outcome(layOut: (store: StorePaths, tree: string) => Promise<void>): Promise<Outcome> {
  const store = storeFor();
  const tree = join(store.root, 'tree');
  try {
    await layOut(store, tree);
    const snapshot = snapshotTree(tree);
    // whiteouts carry no time: theirs is when they were made
    for (const info of Object.values(snapshot)) if (info.type === 'char' && info.rdev === '0') info.mtimeNs = '';
    return { tree: snapshot };
  } catch (e) {
    if (!(e instanceof MinisandboxError)) throw e;
    return { code: e.code };
  }
}

function byNode(manifest: string, idShift = 0): Promise<Outcome> {
  return outcome(async (store, tree) => {
    await materialize(store, readManifest(manifest, 'm', { parentsAndLinks: 'caller' }), tree, {
      idShift,
      share: true,
      whiteouts: 'chardev',
      overlayXattrNs: 'user',
    });
  });
}

function byHelper(manifest: string, idShift = 0): Promise<Outcome> {
  return outcome(async (store, tree) => {
    mkdirSync(tree, { mode: 0o700 });
    const stream = await FsmetaStream.start(tree);
    expect(stream.decodesFrames).toBe(true);
    stream.layOutManifest({
      manifest,
      label: 'm',
      idShift,
      whiteouts: 'chardev',
      overlayXattrNs: 'user',
      linksDir: store.linksDir,
      tmpPrefix: join(store.tmpDir, 'link-'),
      expected: [],
      repeated: [EMPTY.slice(7)],
    });
    try {
      await stream.close();
    } catch (e) {
      await stream.abort();
      throw e;
    }
  });
}

/** Rejections may name the first rule broken differently (a path check before or after the canonical-form check): both are refusals of input. */
function normalized(o: Outcome): Outcome {
  return 'code' in o && (o.code === 'UNSAFE_PATH' || o.code === 'INVALID_INPUT') ? { code: 'REFUSED' } : o;
}

describe('the lay-out helper lays out plain manifests exactly as node does', () => {
  it('on valid manifests: the same trees, sharing files the same way', async () => {
    let withXattrs = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const path = join(work, `valid-${seed}`);
      writeFileSync(path, validManifest(seed));
      const helper = await byHelper(path);
      expect('tree' in helper, JSON.stringify(helper)).toBe(true);
      expect(helper).toEqual(await byNode(path));
      withXattrs += Object.values((helper as { tree: Record<string, { xattrs?: object }> }).tree).filter((i) => i.xattrs !== undefined).length;
    }
    // xattrs were laid out (and compared), not only parsed
    expect(withXattrs).toBeGreaterThan(3);
  });

  it('with owners shifted by an id base (as for rootless sandboxes), and a pool whose inode fits no entry', async () => {
    const path = join(work, 'shifted');
    writeFileSync(path, validManifest(3));
    const helper = await byHelper(path, 100000);
    // every entry but whiteouts (which have no owner in a manifest) is owned in the shifted range
    const owners =
      'tree' in helper
        ? Object.values(helper.tree as Record<string, { uid: number; type: string; rdev?: string }>).filter((i) => !(i.type === 'char' && i.rdev === '0'))
        : [];
    expect(owners.length).toBeGreaterThan(5);
    expect(owners.every((i) => i.uid >= 100000)).toBe(true);
    expect(helper).toEqual(await byNode(path, 100000));
  });

  it('refuses a manifest with escapes it does not read (pulls give those to node, which lays them out)', async () => {
    const path = join(work, 'escaped');
    writeFileSync(path, `${HEADER}\n${canonicalJson({ type: 'fifo', path: 'a\\x5cb', mode: 0o644, uid: 0, gid: 0, mtime: '0' })}\n`);
    expect((await scanFileDigests(path)).plain).toBe(false);
    expect('tree' in (await byNode(path))).toBe(true);
    expect(normalized(await byHelper(path))).toEqual({ code: 'REFUSED' });
  });

  it('on 150 mutated manifests: both accept with the same tree, or both refuse', async () => {
    const r = rng(11);
    const counts = { accepted: 0, refused: 0, notPlain: 0 };
    for (let k = 0; k < Number(process.env.MS_MUTATIONS ?? 150); k++) {
      // bytes as a latin1 string: mutations work on bytes, whatever UTF-8 they break
      const text = mutate(Buffer.from(validManifest(1 + (k % 6))).toString('latin1'), r);
      const path = join(work, `mutated-${k}`);
      writeFileSync(path, Buffer.from(text, 'latin1'));
      const helper = normalized(await byHelper(path));
      if (!(await scanFileDigests(path)).plain) {
        // never handed to the helper by a pull; it still refuses what it cannot read
        counts.notPlain++;
        expect(helper, text).toEqual({ code: 'REFUSED' });
        continue;
      }
      const node = normalized(await byNode(path));
      expect(helper, text).toEqual(node);
      if ('tree' in helper) counts.accepted++;
      else counts.refused++;
    }
    // the mutations exercise both sides
    expect(counts.accepted).toBeGreaterThan(10);
    expect(counts.refused).toBeGreaterThan(50);
    // 300 lay-outs (helper and node): minutes on a loaded 2-core host; the limit only catches a hang
  }, 1_800_000);
});
