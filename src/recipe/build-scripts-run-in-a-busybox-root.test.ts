import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envBuildScript, instanceBuildScript, stagedFiles } from './build-script.js';
import { populateBusyboxRoot, baseRootfsCommand } from './base-rootfs.js';
import { loadRecipe } from './load.js';
import { normalizeRecipe } from './normalize.js';
import type { EnvRecipe } from './schema.js';

const TEST_RECIPES = resolve(import.meta.dirname, '../../recipes/test');
// chroot needs CAP_SYS_CHROOT: root has it, anyone else gets it in a user namespace.
const CHROOT = process.getuid?.() === 0 ? ['chroot'] : ['unshare', '--user', '--map-root-user', 'chroot'];
let root: string;

async function runEnv(file: string): Promise<{ status: number | null; stderr: string }> {
  const { recipe } = await loadRecipe(file);
  if (recipe.kind !== 'env') throw new Error('expected an env recipe');
  const normalized = await normalizeRecipe(recipe);
  if (normalized.kind !== 'env') throw new Error('expected an env recipe');
  // The executor bind-mounts a staging directory; copying into the root stands in for that here.
  await mkdir(join(root, '.staging'), { recursive: true });
  for (const s of stagedFiles(recipe)) await copyFile(s.src, join(root, '.staging', s.name));
  const script = envBuildScript(recipe, normalized, '/.staging');
  const r = spawnSync(CHROOT[0]!, [...CHROOT.slice(1), root, recipe.shell, '-c', script], { encoding: 'utf8', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } });
  return { status: r.status, stderr: r.stderr };
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'bbroot-'));
  await populateBusyboxRoot('/bin/busybox', root);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('build scripts in a busybox root', () => {
  it('the busybox base has a shell and applets', async () => {
    const r = spawnSync(CHROOT[0]!, [...CHROOT.slice(1), root, '/bin/sh', '-c', 'ls / && echo ok'], { encoding: 'utf8' });
    expect(r.stdout).toContain('ok');
    expect(((await stat(join(root, 'tmp'))).mode & 0o7777).toString(8)).toBe('1777');
  });

  it('an env script copies files in with their modes, exports env vars and runs the commands', async () => {
    const r = await runEnv(join(TEST_RECIPES, 'env.yaml'));
    expect(r.status).toBe(0);
    expect(await readFile(join(root, 'etc/greeting'), 'utf8')).toBe('hello from the test env\n');
    expect(((await stat(join(root, 'etc/greeting'))).mode & 0o777).toString(8)).toBe('644');
    expect(await readFile(join(root, 'opt/tool/stamp'), 'utf8')).toBe('built\n');
    expect(await readFile(join(root, 'opt/tool/greeting-copy'), 'utf8')).toBe('hello from the test env\n');
    expect(r.stderr).toContain('+ [3/3] cat "$GREETING_FILE" > /opt/tool/greeting-copy');
  });

  it('stops at the first failing command with its exit status and names it', async () => {
    const r = await runEnv(join(TEST_RECIPES, 'fail-env.yaml'));
    expect(r.status).toBe(3);
    expect(r.stderr).toContain('minisandbox: command [2/2] failed with exit status 3');
  });

  it('runs each command in its own shell in the workdir, with quoting intact', async () => {
    const recipe: EnvRecipe = {
      kind: 'env',
      parent: { recipe: 'x' },
      env: { Q: 'it\'s "quoted" $HOME' },
      files: [],
      workdir: '/work dir',
      network: false,
      shell: '/bin/sh',
      commands: ['cd /tmp', 'pwd > /where', 'printf %s "$Q" > /q'],
    };
    const script = envBuildScript(
      recipe,
      { v: 1, kind: 'env', commands: recipe.commands, env: recipe.env, files: [], workdir: recipe.workdir, network: false, shell: '/bin/sh' },
      '/.staging',
    );
    expect(spawnSync(CHROOT[0]!, [...CHROOT.slice(1), root, '/bin/sh', '-c', script]).status).toBe(0);
    expect(await readFile(join(root, 'where'), 'utf8')).toBe('/work dir\n');
    expect(await readFile(join(root, 'q'), 'utf8')).toBe(`it's "quoted" $HOME`);
    const inst = instanceBuildScript({
      kind: 'instance',
      parent: { recipe: 'x' },
      repo: { path: '/r' },
      commit: 'a'.repeat(40),
      workdir: '/work dir',
      commands: ['false'],
      env: {},
      shell: '/bin/sh',
    });
    const r = spawnSync(CHROOT[0]!, [...CHROOT.slice(1), root, '/bin/sh', '-c', inst], { encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('command [1/1] failed');
  });

  it('builds debootstrap, tarball and directory commands from the recipe', () => {
    expect(
      baseRootfsCommand(
        { type: 'debootstrap', suite: 'bookworm', variant: 'minbase', include: ['gpgv', 'ca-certificates'], mirror: 'http://deb.debian.org/debian' },
        '/t',
      ),
    ).toEqual(['debootstrap', '--variant=minbase', '--include=ca-certificates,gpgv', 'bookworm', '/t', 'http://deb.debian.org/debian']);
    expect(baseRootfsCommand({ type: 'directory', path: '/src' }, '/t')).toEqual(['cp', '-a', '--', '/src/.', '/t/']);
  });
});
