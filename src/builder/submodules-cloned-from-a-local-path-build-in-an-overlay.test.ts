/**
 * A dataset whose repository has a submodule that names a local path (a mirror an env layer holds,
 * as offline builds of jq-like repositories do), built by `minisandbox build` with the spec's
 * `git submodule update --init`. git clones a local path by hardlinking its objects and, since
 * 2.39.5 (CVE-2024-32021), checks that each link is the inode it linked; in a build sandbox the
 * source is in a lower overlayfs layer, where the link copies the file up to a new inode, so the
 * clone died with `hardlink different from source` (and, before that, git refuses the file
 * transport for submodules). Build sandboxes now clone local paths through the file transport.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hostGitFiles, makeRepo } from '../../test/helpers/host-git-tree.js';
import { runCli } from '../../test/helpers/run-cli.js';

const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const git = (...args: string[]): string => execFileSync('git', args, { encoding: 'utf8', env: GIT_ENV }).trim();

const work = mkdtempSync(join(tmpdir(), 'ms-submodule-build-'));
chmodSync(work, 0o755); // the build sandboxes' ids must reach the store below it
afterAll(() => rmSync(work, { recursive: true, force: true }));
const where = ['--registry', join(work, 'registry'), '--store', join(work, 'store')];

/** The host's git (binary, shared libraries, the scripts `git submodule` runs) and the mirror, as files of an env over busybox. */
function writeRecipes(mirror: string): void {
  const core = ['git-submodule', 'git-sh-setup', 'git-sh-i18n', 'git-sh-i18n--envsubst'].map((f) => `/usr/lib/git-core/${f}`);
  const files = [
    ...[...hostGitFiles(), ...core].map((f) => ({ src: f, dest: f })),
    // what the file transport runs (Debian's is a link to git)
    { src: '/usr/bin/git', dest: '/usr/bin/git-upload-pack' },
    { src: mirror, dest: '/mirrors/sub.git' },
  ];
  writeFileSync(join(work, 'base.yaml'), 'kind: base\nname: busybox\nfrom:\n  type: busybox\n');
  writeFileSync(
    join(work, 'env.yaml'),
    `kind: env\nname: git-and-mirror\nparent: base.yaml\nnetwork: false\nfiles:\n${files.map((f) => `  - {src: ${f.src}, dest: ${f.dest}}\n`).join('')}`,
  );
  writeFileSync(
    join(work, 'specs.yaml'),
    'base: base.yaml\ndefaults:\n  workdir: /testbed\n  testCmd: sh run.sh\n  logParser: pytest\n' +
      'repos:\n  test/super:\n    "1.0":\n      env: env.yaml\n      install: [git submodule update --init]\n',
  );
}

describe('a submodule that names a local path', () => {
  it('is cloned by the spec install in the build sandbox, and the instance holds it at its pinned commit', async () => {
    const sub = join(work, 'sub');
    makeRepo(sub, { greeting: 'hello from the submodule\n' });
    const mirror = join(work, 'sub.git');
    git('clone', '-q', '--mirror', sub, mirror);
    const superRepo = join(work, 'repos/test/super');
    makeRepo(superRepo, { 'run.sh': 'cat vendor/sub/greeting\n' });
    // the gitlink is added from the host's copy; .gitmodules then names the path the sandbox sees
    git('-C', superRepo, '-c', 'protocol.file.allow=always', 'submodule', 'add', '-q', mirror, 'vendor/sub');
    git('-C', superRepo, 'config', '-f', '.gitmodules', 'submodule.vendor/sub.url', '/mirrors/sub.git');
    git('-C', superRepo, 'add', '-A');
    git('-C', superRepo, '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'vendor the submodule');
    const commit = git('-C', superRepo, 'rev-parse', 'HEAD');
    const pinned = git('-C', sub, 'rev-parse', 'HEAD');
    writeRecipes(mirror);
    const row = { instance_id: 'test__super-1', repo: 'test/super', base_commit: commit, version: '1.0', patch: '', test_patch: '' };
    writeFileSync(join(work, 'dataset.jsonl'), `${JSON.stringify({ ...row, FAIL_TO_PASS: '[]', PASS_TO_PASS: '[]' })}\n`);

    const built = await runCli([
      ...where,
      '--json',
      '--progress',
      'none',
      'build',
      join(work, 'dataset.jsonl'),
      '--specs',
      join(work, 'specs.yaml'),
      '--repos',
      join(work, 'repos'),
      '--dataset',
      'sm',
    ]);
    const nodes = (JSON.parse(built.stdout) as { nodes: Array<{ kind: string; status: string; log?: string }> }).nodes;
    const failed = nodes.filter((n) => n.status !== 'built').map((n) => `${n.kind} ${n.status}:\n${n.log === undefined ? '' : readFileSync(n.log, 'utf8')}`);
    expect(failed).toEqual([]);
    expect(built.code).toBe(0);

    const ran = await runCli([...where, 'run', 'sm/test__super-1', '--', 'sh', '-c', 'sh run.sh && git submodule status']);
    expect(ran.stderr).toBe('');
    expect(ran.code).toBe(0);
    // checked out (no `-`) at the commit the superproject pins (no `+`)
    expect(ran.stdout).toBe(`hello from the submodule\n ${pinned} vendor/sub (heads/main)\n`);
  }, 300_000);
});
