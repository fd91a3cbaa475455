/**
 * The built CLI's entry (dist/cli.cjs, see bin/build-cli.mjs): runs the command module's bundle, dist/cli-bundle-<module>.cjs,
 * with a V8 code cache, as v8-compile-cache does (Node 20 has no module.enableCompileCache).
 *
 * Compiling the bundle's code was the largest part of the CLI's start-up after node's own, and
 * every sandboxed command pays it. The cache holds the code V8 compiled during one run of a
 * command module (run, store, ...: each compiles other functions), is written when the process
 * exits, and is keyed by the bundle's hash, the module and node's version. A run that failed or
 * showed help compiled little of the command's own path: its cache is kept as partial and replaced
 * by the first successful run's (a `run` from a partial cache took ~10 ms longer). V8 checks it on load
 * (its version, flags and the source's length) and rejects one that does not fit: the bundle is
 * then compiled from source and the cache rewritten. It lives beside the bundle, or, where that is
 * not writable (an installed package run by another user), in the user's cache dir.
 *
 * The entry is CommonJS and the bundle a CommonJS function: an ES module entry costs node its
 * ESM loader (~20 ms of CPU per start). `--version` is answered before the bundle is read.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Script } from 'node:vm';
import { BEFORE_EXEC } from '../util/before-exec.js';
import { asksForVersionOnly, commandModule, packageVersion } from './command-line.js';

/** The bundle's content hash, set by bin/build-cli.mjs. */
declare const MSB_BUNDLE_HASH: string;

/** The bundle's parameters: CommonJS's, and the function its dynamic imports of packages call. */
type BundleFunction = (
  exports: object,
  require: NodeJS.Require,
  module: { exports: object },
  filename: string,
  dirname: string,
  importPackage: (specifier: string) => Promise<unknown>,
) => void;

const argv = process.argv.slice(2);
if (asksForVersionOnly(argv)) process.stdout.write(`${packageVersion()}\n`);
else runBundle();

function runBundle(): void {
  // the bundle of the command's module (bin/build-cli.mjs), or of every module
  const part = commandModule(argv);
  const file = join(__dirname, part === undefined ? 'cli-bundle.cjs' : `cli-bundle-${part}.cjs`);
  const base = `cli-${MSB_BUNDLE_HASH}-${part ?? 'all'}-${process.version}-${process.arch}`;
  const names: CacheNames = { complete: `${base}.v8cache`, partial: `${base}.partial.v8cache` };
  const dirs = [join(__dirname, 'v8-cache'), join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'minisandbox', 'v8-cache')];
  let cachedData: Buffer | undefined;
  let complete = false;
  for (const d of dirs) {
    cachedData = readOrUndefined(join(d, names.complete));
    complete = cachedData !== undefined;
    cachedData ??= readOrUndefined(join(d, names.partial));
    if (cachedData !== undefined) break;
  }
  // a function expression taking a CommonJS module's parameters and the import function; ASCII
  // (the build checks), and latin1 makes the string with the least work
  const script = new Script(readFileSync(file, 'latin1'), { filename: file, ...(cachedData === undefined ? {} : { cachedData }) });
  // at exit: the cache then holds every function this run compiled, not only the top level
  const rejected = script.cachedDataRejected === true;
  if (!complete || rejected) {
    let saved = false;
    const save = (representative: boolean): void => {
      if (saved) return;
      saved = true;
      if (representative) saveCache(script, dirs, names.complete, names.partial);
      // a rejected complete cache goes: it would be read (and rejected) first at every start
      else if (cachedData === undefined || rejected) saveCache(script, dirs, names.partial, rejected && complete ? names.complete : undefined);
    };
    process.once('exit', (code) => save(code === 0 && !argv.some((a) => a === '--help' || a === '-h' || a === 'help')));
    // a run that hands its sandbox to the launcher (sandbox/run-in-place.ts) never exits
    process.once(BEFORE_EXEC, () => save(true));
  }
  const bundle = script.runInThisContext() as BundleFunction;
  const module = { exports: {} };
  bundle.call(module.exports, module.exports, require, module, file, __dirname, importPackage);
}

/**
 * The bundle's `import()` of an npm package or node module (code compiled by vm.Script cannot call
 * import() itself without an experimental flag): `require` where it can, which loads no ESM
 * loader, shaped as import() would give it (a CommonJS module's exports as `default` and as named
 * exports); `import()` for an ES module that node's require cannot load (before 20.19, or with
 * top-level await).
 */
function importPackage(specifier: string): Promise<unknown> {
  let exports: unknown;
  try {
    exports = require(specifier);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ERR_REQUIRE_ESM' || code === 'ERR_REQUIRE_ASYNC_MODULE') return import(specifier);
    return Promise.reject(e);
  }
  const isNamespace = typeof exports === 'object' && exports !== null && (exports as Record<symbol, unknown>)[Symbol.toStringTag] === 'Module';
  return Promise.resolve(isNamespace ? exports : { ...(exports as object), default: exports });
}

/** A command module's cache: from a successful run of the command, or from any other. */
interface CacheNames {
  complete: string;
  partial: string;
}

function readOrUndefined(file: string): Buffer | undefined {
  try {
    return readFileSync(file);
  } catch {
    return undefined; // not cached there
  }
}

/**
 * Writes the cache to the first dir that takes it (atomically: racing processes are harmless),
 * removing older bundles' caches there and `replaces` (the partial cache a complete one
 * supersedes). Never throws: it runs as the process exits, and a cache that cannot be written
 * only means the next start compiles again.
 */
function saveCache(script: Script, dirs: string[], name: string, replaces?: string): void {
  let data: Buffer;
  try {
    data = script.createCachedData();
  } catch {
    return;
  }
  for (const d of dirs) {
    const tmp = join(d, `.${name}.${process.pid}`);
    try {
      mkdirSync(d, { recursive: true });
      writeFileSync(tmp, data);
      renameSync(tmp, join(d, name));
      if (replaces !== undefined) rmSync(join(d, replaces), { force: true });
      for (const f of readdirSync(d)) if (f.startsWith('cli-') && !f.startsWith(`cli-${MSB_BUNDLE_HASH}-`)) rmSync(join(d, f), { force: true });
      return;
    } catch {
      // not writable here (nor, maybe, the temporary file there to remove): the next place
      try {
        rmSync(tmp, { force: true });
      } catch {
        // nothing was written
      }
    }
  }
}
