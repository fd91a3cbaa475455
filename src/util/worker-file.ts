/**
 * Worker threads run JavaScript files, which they load without a TypeScript loader. Two kinds:
 *
 * - `*-worker.cjs` files kept as they are: found next to the calling module (the sources under
 *   tsx or vitest, and dist/lib, where the build copies them) or in dist/workers/ (beside the CLI
 *   bundle, dist/cli-bundle.cjs);
 * - `*-worker.ts` modules, typed and sharing code with the library: the build bundles each into a
 *   `.cjs` at those same places (bin/build-workers.mjs); run from the sources, where there is no
 *   such file, they are bundled here on first use (esbuild, in memory) and run from that code.
 *
 * A `*-worker.ts` module may also be a child process's program (workerProcessArgv): one that must
 * run with other rights than this process (in a user namespace of its own), built the same way,
 * and from the sources run through tsx (an in-memory bundle would lose the module paths it finds
 * its own worker files and native helpers by).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

const found = new Map<string, string>();

/** The path of worker file `name` (e.g. `decode-worker.cjs`) for the module at `here` (its import.meta.url), or undefined. */
function builtWorker(here: string, name: string): string | undefined {
  const key = `${here}\0${name}`;
  const hit = found.get(key);
  if (hit !== undefined) return hit;
  for (const rel of [`./${name}`, `./workers/${name}`, `../workers/${name}`]) {
    const p = fileURLToPath(new URL(rel, here));
    if (existsSync(p)) {
      found.set(key, p);
      return p;
    }
  }
  return undefined;
}

/** The path of worker file `name` (e.g. `decode-worker.cjs`) for the module at `here` (its import.meta.url). */
export function workerFile(here: string, name: string): string {
  const p = builtWorker(here, name);
  if (p === undefined) throw new Error(`worker file ${name} not found next to ${here} or in a workers/ folder beside it (rebuild with npm run build)`);
  return p;
}

const bundled = new Map<string, string>();

/**
 * Starts the worker written as `<name>.ts` beside the module at `here`: its built `<name>.cjs`,
 * or, from the sources, the module bundled now.
 */
export function newWorker(here: string, name: string, opts: WorkerOptions = {}): Worker {
  const built = builtWorker(here, `${name}.cjs`);
  if (built !== undefined) return new Worker(built, opts);
  const source = fileURLToPath(new URL(`./${name}.ts`, here));
  let code = bundled.get(source);
  if (code === undefined) {
    if (!existsSync(source)) throw new Error(`worker ${name} not found: neither ${name}.cjs nor ${source} (rebuild with npm run build)`);
    // esbuild is a dependency of the package (the CLI build); only a run from the sources gets here
    const { buildSync } = createRequire(import.meta.url)('esbuild') as typeof import('esbuild');
    const r = buildSync({ entryPoints: [source], bundle: true, platform: 'node', format: 'cjs', target: 'node20', write: false, logLevel: 'silent' });
    code = r.outputFiles[0]?.text ?? '';
    bundled.set(source, code);
  }
  return new Worker(code, { ...opts, eval: true });
}

/**
 * The command line running the child-process program written as `<name>.ts` beside the module at
 * `here`: node with its built `<name>.cjs`, or, from the sources, with tsx's loader.
 */
export function workerProcessArgv(here: string, name: string): string[] {
  const built = builtWorker(here, `${name}.cjs`);
  if (built !== undefined) return [process.execPath, built];
  const source = fileURLToPath(new URL(`./${name}.ts`, here));
  if (!existsSync(source)) throw new Error(`worker ${name} not found: neither ${name}.cjs nor ${source} (rebuild with npm run build)`);
  // tsx is a dependency of the package's development only; a run from the sources has it
  const loader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  return [process.execPath, '--import', loader, source];
}
