#!/usr/bin/env node
/**
 * Copies the worker files (src/**\/*-worker.cjs, started by util/worker-file.ts) beside the built
 * code: `lib` into dist/lib at their source paths (next to the modules that start them), `cli`
 * into dist/workers/ (beside dist/cli.mjs and its chunks). Names are unique across src/.
 */
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');
const mode = process.argv[2];
if (mode !== 'lib' && mode !== 'cli') throw new Error('usage: copy-workers.mjs lib|cli');
const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('-worker.cjs'));
if (mode === 'cli') rmSync(join(root, 'dist', 'workers'), { recursive: true, force: true });
for (const f of files) {
  const to = mode === 'lib' ? join(root, 'dist', 'lib', relative(src, join(src, f))) : join(root, 'dist', 'workers', basename(f));
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(join(src, f), to);
}
