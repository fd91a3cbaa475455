/**
 * Host programs copied into a test rootfs, with the shared libraries `ldd` lists for them: e.g. the
 * host's bash into a busybox root, for what needs a real bash (SWE-ReX's sessions) without a
 * Debian image. Whatever the root had at those paths (a busybox applet's symlink) is replaced, not
 * written through.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';

export function addHostPrograms(root: string, programs: string[]): void {
  const libs = programs.flatMap((p) =>
    execFileSync('ldd', [p], { encoding: 'utf8' })
      .split('\n')
      .map((l) => /(\/\S+)/.exec(l)?.[1])
      .filter((x): x is string => x !== undefined),
  );
  for (const f of new Set([...programs, ...libs])) {
    const to = join(root, f);
    rmSync(to, { force: true });
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(f, to);
    chmodSync(to, 0o755);
  }
}
