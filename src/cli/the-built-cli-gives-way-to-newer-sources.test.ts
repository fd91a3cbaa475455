import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newerSources, sourceNewerThan } from './sources-newer-than-bundle.js';

describe('the built CLI gives way to sources edited after it was built', () => {
  let root: string;
  const past = new Date(Date.now() - 3_600_000);
  const built = new Date(Date.now() - 1_800_000);
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'ms-stale-'));
    mkdirSync(join(root, 'src', 'cli'), { recursive: true });
    mkdirSync(join(root, 'dist'));
    for (const f of ['src/cli/main.ts', 'src/cli/other.ts', 'src/worker.cjs']) {
      writeFileSync(join(root, f), '');
      utimesSync(join(root, f), past, past);
    }
    writeFileSync(join(root, 'dist', 'cli.cjs'), '');
    utimesSync(join(root, 'dist', 'cli.cjs'), built, built);
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('runs the bundle while every source is older', () => {
    expect(newerSources(root, join(root, 'dist', 'cli.cjs'))).toBeUndefined();
  });

  it('runs the sources once one is edited, in any folder, but not for a test file or a file of another kind', () => {
    writeFileSync(join(root, 'src', 'cli', 'x.test.ts'), '');
    writeFileSync(join(root, 'src', 'notes.md'), '');
    expect(sourceNewerThan(join(root, 'src'), built.getTime())).toBe(false);
    writeFileSync(join(root, 'src', 'worker.cjs'), 'changed');
    expect(newerSources(root, join(root, 'dist', 'cli.cjs'))).toBe(join(root, 'src', 'cli', 'main.ts'));
  });

  it('never looks where there are no sources (an installed package)', () => {
    rmSync(join(root, 'src'), { recursive: true });
    expect(newerSources(root, join(root, 'dist', 'cli.cjs'))).toBeUndefined();
  });
});
