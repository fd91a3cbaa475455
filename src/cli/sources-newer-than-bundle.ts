/**
 * In a checkout, the built CLI stands in for its sources only while none is newer than it: an edited
 * checkout then runs the TypeScript sources through tsx's loader, with no build step. Checked here,
 * in the entry's own process, rather than by bin/minisandbox running find: on these machines each
 * program a command starts costs 5 to 15 ms of its start-up. An installed package has no src/ and
 * skips the walk.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Whether a source of the CLI (tests aside) under `dir` was modified after `mtimeMs`. */
export function sourceNewerThan(dir: string, mtimeMs: number): boolean {
  let entries: import('node:fs').Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return false;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    if (e.isDirectory()) {
      if (sourceNewerThan(path, mtimeMs)) return true;
    } else if ((e.name.endsWith('.ts') || e.name.endsWith('.cjs')) && !e.name.endsWith('.test.ts')) {
      if ((statSync(path, { throwIfNoEntry: false })?.mtimeMs ?? 0) > mtimeMs) return true;
    }
  }
  return false;
}

/** The package root's sources when they are newer than `entry` (the built CLI), else undefined. */
export function newerSources(root: string, entry: string): string | undefined {
  const main = join(root, 'src', 'cli', 'main.ts');
  if (!existsSync(main)) return undefined;
  return sourceNewerThan(join(root, 'src'), statSync(entry).mtimeMs) ? main : undefined;
}

/** Runs the CLI from its sources (tsx's loader, named by path: `--import tsx` resolves from the cwd) and exits as it did. */
export function runSources(root: string, main: string, argv: string[]): never {
  const loader = `file://${join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')}`;
  const r = spawnSync(process.execPath, ['--import', loader, main, ...argv], { stdio: 'inherit' });
  if (r.signal !== null) process.kill(process.pid, r.signal);
  process.exit(r.status ?? 1);
}
