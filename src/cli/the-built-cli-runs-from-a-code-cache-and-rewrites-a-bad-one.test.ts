/**
 * The built CLI (bin/build-cli.mjs) compiles its bundle with a V8 code cache (bundle-loader.ts):
 * the first run writes it (kept as partial until a run of the command succeeds), a cache V8 rejects (corrupt, or from another node) is ignored and
 * rewritten, and where the bundle's dir takes no cache the user's cache dir does. Built into a
 * temporary dir: the checkout's dist/ is left as it is.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';

let work: string;
let dist: string;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'ms-cli-cache-'));
  dist = join(work, 'dist');
  execFileSync(process.execPath, [resolve('bin/build-cli.mjs'), dist], { stdio: 'pipe' });
  mkdirSync(join(work, 'registry'));
  // laid out like the package: its npm dependencies, native helpers and package.json one level above dist/
  symlinkSync(resolve('node_modules'), join(work, 'node_modules'));
  symlinkSync(resolve('native'), join(work, 'native'));
  copyFileSync('package.json', join(work, 'package.json'));
}, 120_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

/** `ls` of an empty registry: a command that loads the bundle (the store module) and needs no host set-up. */
function ls(env: Record<string, string> = {}, ...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [join(dist, 'cli.cjs'), '--registry', join(work, 'registry'), '--store', join(work, 'store'), 'ls', ...args], {
    encoding: 'utf8',
    env: { ...process.env, XDG_CACHE_HOME: join(work, 'xdg'), ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function cacheFiles(dir: string): string[] {
  try {
    return readdirSync(dir).filter((f) => f.endsWith('.v8cache'));
  } catch {
    return [];
  }
}

const busybox = publishedBusybox('ms-cli-cache-run-', 'cache/busybox');
/** The built CLI's `run true` on the published environment, and its environment (a cache dir of its own). */
const runTrue = (): string[] => [
  join(dist, 'cli.cjs'),
  '--registry',
  join(busybox.work, 'registry'),
  '--store',
  join(busybox.work, 'store'),
  'run',
  'cache/busybox',
  '--',
  'true',
];
const runEnv = (): NodeJS.ProcessEnv => ({ ...process.env, XDG_CACHE_HOME: join(work, 'xdg') });

describe('the built CLI', () => {
  it('saves the cache of a run that became the launcher, which never exits (before the exec)', () => {
    const r = spawnSync(process.execPath, runTrue(), { encoding: 'utf8', env: runEnv() });
    expect(r.status, r.stderr).toBe(0);
    expect(cacheFiles(join(dist, 'v8-cache'))).toEqual([expect.stringMatching(/^cli-[0-9a-f]{16}-run-v\d+\.\d+\.\d+-\w+\.v8cache$/)]);
    rmSync(join(dist, 'v8-cache'), { recursive: true, force: true });
  });

  it('reaches the exec of a run on a pulled environment without loading the builtins it does not use', () => {
    // what node had loaded when the process became the launcher (util/before-exec.ts)
    const probe = join(work, 'loaded-at-exec.cjs');
    writeFileSync(
      probe,
      `process.once('minisandbox:before-exec', () => require('fs').writeSync(2, 'LOADED ' + JSON.stringify(process.moduleLoadList) + '\\n'));`,
    );
    const env = runEnv();
    expect(spawnSync(process.execPath, runTrue(), { encoding: 'utf8', env }).status).toBe(0); // pulled by now
    const r = spawnSync(process.execPath, ['-r', probe, ...runTrue()], { encoding: 'utf8', env });
    expect(r.status, r.stderr).toBe(0);
    const loaded: string[] = JSON.parse(/^LOADED (.*)$/m.exec(r.stderr)?.[1] ?? 'null');
    for (const m of ['child_process', 'net', 'stream', 'fs/promises', 'crypto']) expect(loaded, m).not.toContain(`NativeModule ${m}`);
    rmSync(join(dist, 'v8-cache'), { recursive: true, force: true });
  });

  it("keeps a failed or help run's cache as partial until a run of the command itself replaces it", () => {
    const dir = join(dist, 'v8-cache');
    expect(ls({}, '--no-such-option').status).toBe(2);
    const partial = cacheFiles(dir);
    expect(partial).toEqual([expect.stringMatching(/^cli-[0-9a-f]{16}-store-v\d+\.\d+\.\d+-\w+\.partial\.v8cache$/)]);
    const thin = readFileSync(join(dir, partial[0] ?? 'missing'));
    expect(ls({}, '--help').status).toBe(0);
    expect(readFileSync(join(dir, partial[0] ?? 'missing')).equals(thin)).toBe(true); // a cache was used: not rewritten
    expect(ls().status).toBe(0);
    const files = cacheFiles(dir);
    expect(files).toEqual([expect.stringMatching(/^cli-[0-9a-f]{16}-store-v\d+\.\d+\.\d+-\w+\.v8cache$/)]);
    expect(files[0]).not.toContain('partial');
    // it holds what the successful run compiled besides: more than the failed run's
    expect(readFileSync(join(dir, files[0] ?? 'missing')).length).toBeGreaterThan(thin.length);
    rmSync(dir, { recursive: true, force: true });
  });

  it('writes a code cache for the command module on its first run, beside the bundle', () => {
    const first = ls();
    expect(first.stderr).toBe('');
    expect(first.status).toBe(0);
    const files = cacheFiles(join(dist, 'v8-cache'));
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^cli-[0-9a-f]{16}-store-v\d+\.\d+\.\d+-\w+\.v8cache$/);
    const again = ls();
    expect(again).toEqual(first);
  });

  it('ignores a cache V8 rejects and writes a good one in its place', () => {
    const [name = 'missing'] = cacheFiles(join(dist, 'v8-cache'));
    const file = join(dist, 'v8-cache', name);
    const good = readFileSync(file);
    const reference = ls();
    writeFileSync(file, Buffer.alloc(good.length, 7));
    const r = ls();
    expect(r).toEqual(reference);
    const rewritten = readFileSync(file);
    expect(rewritten.equals(Buffer.alloc(good.length, 7))).toBe(false);
    expect(rewritten.length).toBeGreaterThan(1000);
  });

  it("writes the cache to the user's cache dir where the bundle's dir takes none", () => {
    rmSync(join(dist, 'v8-cache'), { recursive: true, force: true });
    writeFileSync(join(dist, 'v8-cache'), 'not a directory'); // mkdir fails there, as on a read-only install
    const r = ls();
    expect(r.status).toBe(0);
    expect(cacheFiles(join(work, 'xdg', 'minisandbox', 'v8-cache'))).toHaveLength(1);
    expect(ls()).toEqual(r);
  });

  it("runs each command from its module's own bundle, which holds no other module's code", () => {
    const store = readFileSync(join(dist, 'cli-bundle-store.cjs'), 'latin1');
    const all = readFileSync(join(dist, 'cli-bundle.cjs'), 'latin1');
    expect(all).toContain('registerBuildCommands');
    expect(store).not.toContain('registerBuildCommands');
    expect(store.length).toBeLessThan(all.length);
    // the store bundle gone: `ls` cannot run, so it was that bundle that ran it
    rmSync(join(dist, 'cli-bundle-store.cjs'));
    expect(ls().status).not.toBe(0);
  });

  it('answers --version without the bundles', () => {
    for (const f of readdirSync(dist)) if (f.startsWith('cli-bundle')) rmSync(join(dist, f));
    const r = spawnSync(process.execPath, [join(dist, 'cli.cjs'), '--version'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${JSON.parse(readFileSync('package.json', 'utf8')).version}\n`);
  });
});
