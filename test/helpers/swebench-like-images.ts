/**
 * Images shaped like SWE-bench's per-instance eval images, for the hermetic recipes/test dataset:
 * the shared Debian rootfs (git, bash) as one base layer, and per instance a layer with the
 * repository at its base commit in /testbed and an "environment" under /opt/env that puts the
 * project's test command on PATH only once `source /opt/env/activate` ran (as the harness's eval
 * scripts activate their conda env). Made by buildah, written by skopeo as an OCI layout with one
 * tag per instance (`sweb.eval.x86_64.<SWE-bench image id>`), and kept under SHARED_FIXTURES_DIR
 * by a name that carries every input, so only the first test file of a host pays for it.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ensureDebianRootfs } from '../../src/sandbox/rootfs.js';
import { removeWorkDir } from './images.js';
import { REPO_ROOT, SHARED_FIXTURES_DIR } from './sandbox-testkit.js';

const RECIPE = resolve(REPO_ROOT, 'recipes/test');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
/** Bump when what the images hold changes. */
const VERSION = '1';

export interface SwebenchLikeImages {
  /** OCI layout directory. */
  layout: string;
  /** The layout's tag for an instance. */
  tagFor(instanceId: string): string;
  /** The dataset rows (recipes/test/dataset.jsonl). */
  rows: Array<Record<string, unknown> & { instance_id: string; base_commit: string; patch: string }>;
  /** The test command inside the images (on PATH after `source /opt/env/activate`). */
  testCmd: string;
  preTest: string[];
}

function sh(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20, ...opts }).trim();
}

export function swebenchImageTag(instanceId: string): string {
  return `sweb.eval.x86_64.${instanceId.toLowerCase().replaceAll('__', '_1776_')}`;
}

export async function swebenchLikeImages(): Promise<SwebenchLikeImages> {
  const rows = readFileSync(join(RECIPE, 'dataset.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as SwebenchLikeImages['rows'][number]);
  mkdirSync(SHARED_FIXTURES_DIR, { recursive: true, mode: 0o755 });
  const debian = await ensureDebianRootfs(SHARED_FIXTURES_DIR);
  const key = createHash('sha256')
    .update(VERSION)
    .update(debian)
    .update(readFileSync(join(RECIPE, 'make-repo.sh')))
    .update(readFileSync(join(RECIPE, 'dataset.jsonl')))
    .digest('hex')
    .slice(0, 16);
  const layout = join(SHARED_FIXTURES_DIR, `swebench-like-oci-${key}`);
  const out = { layout, tagFor: swebenchImageTag, rows, testCmd: 'shlib-test', preTest: ['source /opt/env/activate'] };
  if (existsSync(join(layout, 'index.json'))) return out;

  const work = mkdtempSync(join(SHARED_FIXTURES_DIR, '.swebench-like-'));
  try {
    const storage = ['--root', join(work, 'storage'), '--runroot', join(work, 'run'), '--storage-driver', 'overlay'];
    const b = (...args: string[]): string => sh('buildah', [...storage, ...args]);
    const origin = join(work, 'origin');
    execFileSync(join(RECIPE, 'make-repo.sh'), [origin], { stdio: ['ignore', 'ignore', 'inherit'] });

    const c0 = b('from', 'scratch');
    sh('cp', ['-a', `${debian}/.`, `${b('mount', c0)}/`]);
    b('umount', c0);
    b('config', '--env', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '--workingdir', '/testbed', c0);
    b('commit', '--quiet', c0, 'localhost/swebench-like/base:1');
    b('rm', c0);

    const tmpLayout = join(work, 'layout');
    for (const row of rows) {
      const c = b('from', '--pull-never', 'localhost/swebench-like/base:1');
      const m = b('mount', c);
      const testbed = join(m, 'testbed');
      sh('git', ['clone', '-q', '--no-checkout', origin, testbed], { env: GIT_ENV });
      sh('git', ['checkout', '-q', row.base_commit], { cwd: testbed, env: GIT_ENV });
      // as SWE-bench images: no remote to fetch the fix from
      sh('git', ['remote', 'remove', 'origin'], { cwd: testbed, env: GIT_ENV });
      mkdirSync(join(m, 'opt/env/bin'), { recursive: true });
      writeFileSync(join(m, 'opt/env/activate'), 'export PATH=/opt/env/bin:$PATH\nexport SHLIB_ENV=active\n');
      // fails loudly when the env was not activated first
      writeFileSync(
        join(m, 'opt/env/bin/shlib-test'),
        '#!/bin/sh\n[ "$SHLIB_ENV" = active ] || { echo "shlib-test: env not active" >&2; exit 3; }\nexec sh run_tests.sh "$@"\n',
        {
          mode: 0o755,
        },
      );
      b('umount', c);
      b('commit', '--quiet', c, `localhost/swebench-like/${swebenchImageTag(row.instance_id)}:latest`);
      b('rm', c);
      const storage = `[overlay@${join(work, 'storage')}+${join(work, 'run')}]`;
      const cs = `containers-storage:${storage}localhost/swebench-like/${swebenchImageTag(row.instance_id)}:latest`;
      sh('skopeo', ['copy', '--quiet', cs, `oci:${tmpLayout}:${swebenchImageTag(row.instance_id)}`]);
    }
    try {
      renameSync(tmpLayout, layout);
    } catch {
      // another test file finished first; its layout is as good as ours
    }
  } finally {
    removeWorkDir(work);
  }
  return out;
}

/**
 * A specs file for the images' dataset (repo test/shlib, version 1.0): each instance's image named
 * by `image` (with SWE-bench's `{id}`), the images' test command unless `testCmd` replaces it, and
 * their env activated before the tests.
 */
export function writeShlibSpecs(file: string, images: SwebenchLikeImages, opts: { image: string; testCmd?: string }): void {
  writeFileSync(
    file,
    [
      'defaults:',
      `  image: "${opts.image}"`,
      `  testCmd: ${opts.testCmd ?? images.testCmd}`,
      '  logParser: pytest',
      '  workdir: /testbed',
      `  preTest: ${JSON.stringify(images.preTest)}`,
      'repos:',
      '  test/shlib:',
      '    "1.0": {}',
    ].join('\n'),
  );
}
