/**
 * `verify` is complete (issue 14): besides corrupt blobs and dangling refs it reports malformed
 * and empty ref files (which `ls` shows as broken instead of dropping them), objects a manifest
 * names that none of its packs holds, sizes that disagree with the objects or with what the
 * environment declares (what `inspect` reports), and manifests a pull would refuse. Exit 1 for each.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { compress, decompress } from 'zstd-napi';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { sha256 } from '../cas/digest.js';
import type { EnvConfig } from '../layer/env.js';
import { MANIFEST_HEADER } from '../layer/manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { putJsonBlob } from '../registry/blobs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';
import { pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';

const run = promisify(execFile);
const CLI = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'msb-verify-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Problem {
  kind: string;
  subject: string;
  detail: string;
}

let n = 0;
async function freshRegistry(): Promise<{ reg: LocalRegistry; env: EnvConfig; dir: string }> {
  const dir = join(work, `case-${n++}`);
  const reg = new LocalRegistry(join(dir, 'registry'));
  makeRandomTree(join(dir, 'src'), 11, 40);
  await pushTree(reg, new StorePaths(join(dir, 'push-store')), join(dir, 'src'), { tag: 't/good' });
  return { reg, env: (await resolveEnv(reg, 't/good')).config, dir };
}

async function cli(dir: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(CLI, ['--registry', join(dir, 'registry'), '--store', join(dir, 'store'), '--json', ...args], { timeout: 120_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

async function verify(dir: string): Promise<{ code: number; problems: Problem[] }> {
  const r = await cli(dir, ['verify', '--no-store']);
  return { code: r.code, problems: (JSON.parse(r.stdout) as { problems: Problem[] }).problems };
}

/** The layer's manifest lines, rewritten by `edit`, stored as a new manifest blob; the env updated to match. */
async function withManifest(reg: LocalRegistry, env: EnvConfig, edit: (lines: Record<string, unknown>[]) => Record<string, unknown>[]): Promise<EnvConfig> {
  const layer = env.layers[0]!;
  const text = decompress(await reg.getBlob(layer.manifest)).toString('utf8');
  const [, ...body] = text.trimEnd().split('\n');
  const lines = edit(body.map((l) => JSON.parse(l) as Record<string, unknown>));
  const out = `${canonicalJson(MANIFEST_HEADER)}\n${lines.map((e) => `${canonicalJson(e)}\n`).join('')}`;
  const blob = compress(Buffer.from(out));
  await reg.putBlob(sha256(blob), blob);
  const files = lines.filter((e) => e.type === 'file');
  return {
    ...env,
    layers: [
      {
        ...layer,
        digest: sha256(out),
        manifest: sha256(blob),
        entries: lines.length,
        size: files.reduce((s, e) => s + (e.size as number), 0),
        objects: new Set(files.map((e) => e.digest)).size,
      },
    ],
  };
}

describe('verify', () => {
  it('finds nothing wrong in a registry a push made', async () => {
    const { dir } = await freshRegistry();
    expect(await verify(dir)).toEqual({ code: 0, problems: [] });
  });

  it.each([
    ['empty', ''],
    ['holding a path', '../../etc/passwd\n'],
    ['holding half a digest', 'sha256:0123\n'],
  ])('reports a ref file %s, which ls shows as broken', async (_what, body) => {
    const { reg, dir } = await freshRegistry();
    writeFileSync(join(reg.root, 'refs', 'bad%ref'), body);
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems).toEqual([expect.objectContaining({ kind: 'bad-ref', subject: 'bad/ref' })]);
    const ls = await cli(dir, ['ls']);
    expect(ls.code, ls.stderr).toBe(0);
    expect(JSON.parse(ls.stdout)).toEqual(expect.arrayContaining([{ ref: 'bad/ref', broken: expect.any(String) }, expect.objectContaining({ ref: 't/good' })]));
  });

  it('reports objects a manifest names that none of its packs holds', async () => {
    const { reg, env, dir } = await freshRegistry();
    await reg.putRef('t/nopacks', await putJsonBlob(reg, { ...env, layers: [{ ...env.layers[0]!, packs: [] }] }));
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems.length).toBeGreaterThan(0);
    expect(v.problems.every((p) => p.kind === 'missing-object' && p.subject === `layer ${env.layers[0]!.digest}`)).toBe(true);
  });

  it("reports a manifest declaring an object's size other than the object's", async () => {
    const { reg, env, dir } = await freshRegistry();
    const lying = await withManifest(reg, env, (lines) => {
      const f = lines.find((e) => e.type === 'file' && (e.size as number) > 0)!;
      const again = lines.filter((e) => e.digest === f.digest);
      for (const e of again) e.size = (e.size as number) + 1;
      return lines;
    });
    await reg.putRef('t/lies', await putJsonBlob(reg, lying));
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems).toEqual([
      expect.objectContaining({ kind: 'bad-size', detail: expect.stringMatching(/declares object sha256:\w+ as \d+ bytes, its pack holds \d+/) }),
    ]);
  });

  it('reports an environment declaring layer sizes and counts its manifest does not have', async () => {
    const { reg, env, dir } = await freshRegistry();
    const l = env.layers[0]!;
    await reg.putRef('t/inflated', await putJsonBlob(reg, { ...env, layers: [{ ...l, size: l.size + 1000, entries: l.entries + 1 }] }));
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems.map((p) => p.detail).sort()).toEqual([
      `the environment declares entries ${l.entries + 1}, the manifest has ${l.entries}`,
      `the environment declares size ${l.size + 1000}, the manifest has ${l.size}`,
    ]);
  });

  it('reports a manifest a pull would refuse (an entry escaping the layer)', async () => {
    const { reg, env, dir } = await freshRegistry();
    const evil = await withManifest(reg, env, (lines) => [
      ...lines,
      { type: 'symlink', path: 'zz-escape', target: '/etc', mode: 0o777, uid: 0, gid: 0, mtime: '0' },
      { type: 'dir', path: 'zz-escape/x', mode: 0o755, uid: 0, gid: 0, mtime: '0' },
    ]);
    await reg.putRef('t/evil', await putJsonBlob(reg, evil));
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems).toEqual([
      expect.objectContaining({ kind: 'bad-manifest', subject: `layer ${evil.layers[0]!.digest}` }),
      expect.objectContaining({ kind: 'refused-ref', subject: 't/evil' }),
    ]);
  });

  it('reports entries whose parent the layer has no directory for (as imports made before implicit parents), which a pull refuses', async () => {
    const { reg, env, dir } = await freshRegistry();
    const orphaned = await withManifest(reg, env, (lines) => [...lines, { ...lines.find((e) => e.type === 'file')!, path: 'zz-work/task.txt' }]);
    const orphans = await putJsonBlob(reg, orphaned);
    await reg.putRef('t/orphans', orphans);
    await reg.putRef('t/orphans-too', orphans);
    const broken = async (): Promise<unknown> => {
      const ls = await cli(dir, ['ls']);
      expect(ls.code, ls.stderr).toBe(0);
      return JSON.parse(ls.stdout);
    };
    const shownBroken = [
      { ref: 't/orphans', broken: expect.stringMatching(/a pull refuses its layer sha256:\w+: unsafe path "zz-work\/task.txt": its parent/) },
      { ref: 't/orphans-too', broken: expect.stringMatching(/a pull refuses its layer/) },
    ];
    // a pull refuses it and says why; ls then shows every ref reaching it as broken
    const pull = await cli(dir, ['pull', 't/orphans']);
    expect(pull.code).toBe(1);
    expect(pull.stderr).toMatch(/zz-work\/task.txt.{0,4}: its parent is not a directory of this layer/);
    expect(await broken()).toEqual(expect.arrayContaining(shownBroken));
    // verify finds it without a pull, and so does ls after it
    rmSync(join(dir, 'store', 'refused'), { recursive: true });
    expect(await broken()).toEqual(expect.arrayContaining([expect.objectContaining({ ref: 't/orphans', env: orphans })]));
    const v = await verify(dir);
    expect(v.code).toBe(1);
    expect(v.problems).toEqual([
      expect.objectContaining({
        kind: 'bad-manifest',
        subject: `layer ${orphaned.layers[0]!.digest}`,
        detail: expect.stringMatching(/"zz-work\/task.txt": its parent "zz-work" is not a directory entry/),
      }),
      expect.objectContaining({ kind: 'refused-ref', subject: 't/orphans' }),
      expect.objectContaining({ kind: 'refused-ref', subject: 't/orphans-too' }),
    ]);
    expect(await broken()).toEqual(expect.arrayContaining(shownBroken));
  });
});
