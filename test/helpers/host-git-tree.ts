/**
 * The host's git in a test tree: /usr/bin/git and the shared libraries ldd names for it, copied
 * to the same paths under `root` (a busybox root then runs git in a sandbox: a few MB, where the
 * Debian fixture is 340 MB to push), and a repository made there with the host's git.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

/** /usr/bin/git and the shared libraries ldd names for it. */
export function hostGitFiles(): string[] {
  const libs = [...execFileSync('ldd', ['/usr/bin/git'], { encoding: 'utf8' }).matchAll(/(\/\S+) \(0x/g)].map((m) => m[1]!);
  return ['/usr/bin/git', ...libs];
}

export function addHostGit(root: string): void {
  for (const f of hostGitFiles()) {
    mkdirSync(join(root, dirname(f)), { recursive: true });
    copyFileSync(f, join(root, f));
  }
}

/** A repository at `dir` with `files` (path -> content) committed. */
export function makeRepo(dir: string, files: Record<string, string>): void {
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, p)), { recursive: true });
    writeFileSync(join(dir, p), text);
  }
  execFileSync('git', ['init', '-q', '-b', 'main', dir], { env: GIT_ENV });
  execFileSync('git', ['-C', dir, 'add', '-A'], { env: GIT_ENV });
  execFileSync('git', ['-C', dir, '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'base'], { env: GIT_ENV });
}
