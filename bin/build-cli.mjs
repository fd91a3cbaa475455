#!/usr/bin/env node
/**
 * Bundles the CLI (src/cli/main.ts) into CommonJS files, dist/cli-bundle*.cjs (see MODULES), run by the entry
 * dist/cli.cjs (src/cli/bundle-loader.ts) with a V8 code cache. npm packages with native parts or
 * large trees stay external. Each command still runs only its own code: the modules main.ts and
 * the actions import dynamically are wrapped by esbuild to run on first import; with the code
 * cache, code that is never called costs next to nothing to load.
 *
 * The file is one function expression, compiled and called by the entry; the bundle's `import()`
 * of an external package becomes `__msbImport(...)`, a function the entry passes in: code
 * compiled by vm.Script cannot import() by itself in Node 20.
 *
 * zod's main entry re-exports every locale of its error messages (`z.locales`, about half of the
 * zod code in the bundle, and so a sizeable part of the start-up's parsing); minisandbox uses none
 * but English, which zod configures itself, so the bundle gets only that one.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// another output dir (first argument): for tests, which must not replace the checkout's build
const dist = process.argv[2] === undefined ? join(root, 'dist') : process.argv[2];
for (const old of ['cli-chunks', 'cli.mjs', 'v8-cache']) rmSync(join(dist, old), { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

const EXTERNAL = ['zstd-napi', '@aws-sdk/client-s3', 'execa', 'yaml', 'tar-stream', 'fastify', '@fastify/multipart', 'yauzl', 'esbuild'];

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

/**
 * `import { z } from 'zod'` takes zod's namespace through a re-export, which esbuild keeps whole
 * (JSON Schema conversion, ISO, coerce, every check: ~110 KB of zod's ~200 KB the bundle runs at
 * each start). Imported as a namespace itself, only the properties the code reads are kept.
 */
const zodExternal = join(dirname(createRequire(import.meta.url).resolve('zod')), 'v4', 'classic', 'external.js');
/** @type {import('esbuild').Plugin} */
const zodNamespace = {
  name: 'zod-namespace',
  setup(b) {
    b.onLoad({ filter: /[\\/]src[\\/].*\.ts$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes("import { z } from 'zod';")) return undefined;
      return { contents: text.replaceAll("import { z } from 'zod';", `import * as z from ${JSON.stringify(zodExternal)};`), loader: 'ts' };
    });
  },
};

/**
 * In the run bundle, node:child_process, node:fs/promises and node:stream are loaded on first use:
 * requiring them costs ~6, ~2 and ~2.5 ms (child_process loads net and dgram; fs/promises the
 * stream machinery and readline), and a run on an environment already pulled, handed to the
 * launcher (sandbox/run-in-place.ts), calls none of them. Their importers get an object whose
 * properties are the real module's, read when used (esbuild's interop copies them as getters);
 * the names are this node's own, read here (the bundle is built by the node that runs it: bin/setup).
 */
const LAZY_BUILTINS = ['child_process', 'fs/promises', 'stream'];
const requireHere = createRequire(import.meta.url);
/** @type {import('esbuild').Plugin} */
const lazyBuiltins = {
  name: 'lazy-builtins',
  setup(b) {
    b.onResolve({ filter: new RegExp(`^(node:)?(${LAZY_BUILTINS.map((n) => n.replace('/', '\\/')).join('|')})$`) }, (args) => {
      const name = args.path.replace(/^node:/, '');
      return args.namespace === 'lazy-builtin' ? { path: `node:${name}`, external: true } : { path: name, namespace: 'lazy-builtin' };
    });
    b.onLoad({ filter: /.*/, namespace: 'lazy-builtin' }, (args) => {
      const names = Object.keys(requireHere(`node:${args.path}`));
      return {
        contents: `let real;
const load = () => (real ??= require(${JSON.stringify(`node:${args.path}`)}));
for (const k of ${JSON.stringify(names)}) Object.defineProperty(module.exports, k, { enumerable: true, get: () => load()[k] });`,
        loader: 'js',
      };
    });
  },
};

/** CommonJS has no import.meta: the modules that use import.meta.url get the file's URL instead. */
const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  external: EXTERNAL,
  logLevel: 'warning',
  charset: 'ascii',
  minify: true,
  keepNames: true,
  define: { 'import.meta.url': 'commonjsFileUrl' },
  inject: [join(root, 'src', 'cli', 'commonjs-file-url.ts')],
  write: false,
};

/**
 * One bundle per command module (`cli-bundle-run.cjs`, ...: main.ts folds away the other modules'
 * imports where MSB_BUNDLE_MODULE is set), plus `cli-bundle.cjs` with every module for help and
 * unknown commands. A command reads and compiles only its own module's code: the run bundle is half
 * the size of the whole, which a one-shot `run` reads and turns into a string at every start.
 */
const MODULES = ['build', 'run', 'score', 'serve', 'store', 'swe-agent'];
const packages = new RegExp(`\\bimport\\((?=["'](?:node:[a-z_/]+|${EXTERNAL.map((e) => e.replace(/[/]/g, '\\/')).join('|')})["']\\))`, 'g');
const bundles = await Promise.all(
  [undefined, ...MODULES].map(async (module) => {
    const file = module === undefined ? 'cli-bundle.cjs' : `cli-bundle-${module}.cjs`;
    const bundled = await build({
      ...common,
      entryPoints: [join(root, 'src', 'cli', 'main.ts')],
      outfile: join(dist, file),
      define: { ...common.define, MSB_BUNDLE_MODULE: module === undefined ? 'undefined' : JSON.stringify(module) },
      plugins: [zodNamespace, englishOnlyZod, ...(module === 'run' ? [lazyBuiltins] : [])],
      // keepNames is an Object.defineProperty per function and class at load, ~10 ms of a one-shot
      // run (bench/cli.ts); nothing reads a function's name (errors set theirs), only stack traces
      // do, so the long-lived commands keep readable ones and the sandbox commands start faster.
      keepNames: module !== 'run',
    });
    const code = bundled.outputFiles[0].text.replace(/^#!.*\n/, '').replace(packages, '__msbImport(');
    if (/\bimport\(/.test(code)) throw new Error(`${file} has an import() of something not external: add it to EXTERNAL or import it statically`);
    // the entry reads it as latin1, which is the same text only for ASCII (esbuild escapes the rest)
    if (/[^\x00-\x7f]/.test(code)) throw new Error(`${file} is not ASCII: set esbuild charset ascii`);
    return { file, code };
  }),
);
for (const old of readdirSync(dist)) if (/^cli-bundle(-[a-z-]+)?\.cjs$/.test(old)) rmSync(join(dist, old));
// A function expression with CommonJS's parameters plus the import function: what the entry
// compiles as it is (no string concatenation: a copy of the whole text less at each start).
for (const { file, code } of bundles) writeFileSync(join(dist, file), `(function (exports, require, module, __filename, __dirname, __msbImport) {${code}\n})`);

const hash = createHash('sha256');
for (const { code } of bundles) hash.update(code);
const loader = await build({
  ...common,
  entryPoints: [join(root, 'src', 'cli', 'bundle-loader.ts')],
  outfile: join(dist, 'cli.cjs'),
  define: { ...common.define, MSB_BUNDLE_HASH: JSON.stringify(hash.digest('hex').slice(0, 16)) },
  banner: { js: '#!/usr/bin/env node' },
});
writeFileSync(join(dist, 'cli.cjs'), loader.outputFiles[0].text, { mode: 0o755 });
