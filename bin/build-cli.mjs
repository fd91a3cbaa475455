#!/usr/bin/env node
/**
 * Bundles the CLI (src/cli/main.ts) into dist/cli.mjs plus chunks in dist/cli-chunks/, one per
 * dynamic import, so a command loads only its own code (start-up is part of every sandboxed
 * command's cost). npm packages with native parts or large trees stay external.
 *
 * zod's main entry re-exports every locale of its error messages (`z.locales`, about half of the
 * zod code in the bundle, and so a sizeable part of the start-up's parsing); minisandbox uses none
 * but English, which zod configures itself, so the bundle gets only that one.
 */
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
rmSync(join(root, 'dist', 'cli-chunks'), { recursive: true, force: true });

/** @type {import('esbuild').Plugin} */
const englishOnlyZod = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]v4[\\/](classic|core)[\\/]/.test(args.importer)
        ? { path: join(dirname(args.importer), '..', 'locales', 'index.js'), namespace: 'zod-locales' }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: `export { default as en } from ${JSON.stringify(join(dirname(args.path), 'en.js'))};`,
      resolveDir: dirname(args.path),
    }));
  },
};

await build({
  entryPoints: { cli: join(root, 'src', 'cli', 'main.ts') },
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['zstd-napi', '@aws-sdk/client-s3', 'execa', 'yaml', 'commander', 'tar-stream', 'fastify', '@fastify/multipart', 'yauzl'],
  outdir: join(root, 'dist'),
  outExtension: { '.js': '.mjs' },
  chunkNames: 'cli-chunks/[name]-[hash]',
  logLevel: 'warning',
  minify: true,
  keepNames: true,
  plugins: [englishOnlyZod],
});
