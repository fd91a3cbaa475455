#!/usr/bin/env node
/**
 * Puts the worker files (started by src/util/worker-file.ts) beside the built code: `lib` into
 * dist/lib at their source paths (next to the modules that start them), `cli` into dist/workers/
 * (beside the CLI bundle, dist/cli-bundle.cjs). `*-worker.cjs` files are copied as they are; typed
 * `*-worker.ts` modules are bundled into a `*-worker.cjs` each (a worker thread loads no
 * TypeScript). Names are unique across src/. A bundled worker's `import.meta.url` is the URL of
 * its own file (as in the CLI bundle), so the modules in it find their worker files and native
 * helpers from where it sits.
 */
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSync } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');
const mode = process.argv[2];
if (mode !== 'lib' && mode !== 'cli') throw new Error('usage: build-workers.mjs lib|cli');
const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('-worker.cjs') || f.endsWith('-worker.ts'));
if (mode === 'cli') rmSync(join(root, 'dist', 'workers'), { recursive: true, force: true });
for (const f of files) {
  const name = basename(f).replace(/\.ts$/, '.cjs');
  const to = mode === 'lib' ? join(root, 'dist', 'lib', dirname(f), name) : join(root, 'dist', 'workers', name);
  mkdirSync(dirname(to), { recursive: true });
  if (f.endsWith('.cjs')) copyFileSync(join(src, f), to);
  else
    buildSync({
      entryPoints: [join(src, f)],
      outfile: to,
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      logLevel: 'warning',
      // a native addon loads from its package, never from a bundle
      external: ['zstd-napi'],
      define: { 'import.meta.url': 'commonjsFileUrl' },
      inject: [join(src, 'cli', 'commonjs-file-url.ts')],
    });
}
