/**
 * The long-history test project (recipes/long/make-repo.sh) made once per machine and shared by
 * the test files that read it: generating 3000 commits costs tens of seconds. Cached under the
 * temp dir by the hash of the generator's sources, made under a temporary name and renamed into
 * place (files racing to make it both succeed). Readers must not write into it.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

export async function longRepo(): Promise<string> {
  const here = resolve(import.meta.dirname, '../../recipes/long');
  const hash = createHash('sha256')
    .update(readFileSync(join(here, 'make-repo.ts')))
    .update(readFileSync(join(here, 'make-repo.sh')))
    .digest('hex')
    .slice(0, 16);
  const final = join(tmpdir(), `minisandbox-test-longlib-${hash}`);
  if (existsSync(join(final, '.git'))) return final;
  const tmp = mkdtempSync(join(tmpdir(), `minisandbox-test-longlib-${hash}.tmp-`));
  try {
    await promisify(execFile)(join(here, 'make-repo.sh'), [join(tmp, 'repo')]);
    try {
      renameSync(join(tmp, 'repo'), final);
    } catch (e) {
      // another test file made it first: the same commits
      if (!existsSync(join(final, '.git'))) throw e;
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return final;
}
