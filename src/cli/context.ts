/** Global options -> the registry and store a command works on. */
import { statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidInputError } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from '../store/paths.js';
import { Output, type ProgressMode } from './output.js';

export interface GlobalOptions {
  registry?: string;
  store?: string;
  json?: boolean;
  progress?: ProgressMode;
}

export interface Context {
  registry: Registry;
  store: StorePaths;
  out: Output;
}

export function defaultRegistry(): string {
  return process.env.MINISANDBOX_REGISTRY ?? resolve('registry');
}

/**
 * A directory option must name a directory or a place one can be made: a file on the way
 * (`--store /etc/passwd`) is the user's mistake, said before any command fails on it with ENOTDIR.
 */
export function checkDirOption(option: string, path: string): void {
  for (let p = resolve(path); ; p = dirname(p)) {
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch {
      if (dirname(p) === p) return;
      continue; // not there (yet): made when needed, if its parent allows
    }
    if (isDir) return;
    throw new InvalidInputError(`${option} ${path}: ${p} is not a directory`, `give ${option} a directory (it is created if missing)`);
  }
}

/**
 * The registry, store and output of a command. The registry and store modules are imported here,
 * not at load, so that `--help`, `--version` and bad options stay fast.
 * `progressWhenNotTty`: what `--progress auto` means off a terminal (see Output).
 */
export async function makeContext(g: GlobalOptions, opts: { progressWhenNotTty?: 'json' | 'none' } = {}): Promise<Context> {
  const out = new Output(g.json === true, g.progress ?? 'auto', undefined, undefined, opts.progressWhenNotTty ?? 'json');
  const registry = g.registry ?? defaultRegistry();
  if (!registry.startsWith('s3://')) checkDirOption('--registry', registry);
  const storeDir = g.store ?? process.env.MINISANDBOX_STORE;
  if (storeDir !== undefined) checkDirOption('--store', storeDir);
  const { StorePaths, defaultStoreDir } = await import('../store/paths.js');
  return { registry: await openRegistryFor(registry, out), store: new StorePaths(g.store ?? defaultStoreDir()), out };
}

/**
 * The AWS SDK warns on every Node below 22, in nine lines on stderr, that its versions of 2027
 * will need a newer Node: nothing a user of this command can act on. Its documented switch turns
 * that one warning off (every other warning stays), once, before the first S3 client is made.
 */
export function quietAwsSdkNodeWarning(): void {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
}

/** The S3 client's code is loaded only for an S3 registry. */
async function openRegistryFor(url: string, out: Output): Promise<Registry> {
  if (!url.startsWith('s3://')) return (await import('../registry/open-local.js')).openLocalRegistry(url);
  quietAwsSdkNodeWarning();
  const [{ openRegistry }, { errorMessage }] = await Promise.all([import('../registry/open.js'), import('../errors.js')]);
  // a retried request is said, so a registry that stopped answering is no silent hang
  return openRegistry(url, {
    hooks: {
      onRetry: (r) => out.progress({ phase: 'retry', message: `registry: ${r.what}: ${errorMessage(r.error)}; retry ${r.attempt} in ${r.delayMs} ms` }),
    },
  });
}

/** The context of a command that reads or writes the store: the store is made (or checked) private first. */
export async function storeContext(g: GlobalOptions, opts: { progressWhenNotTty?: 'json' | 'none' } = {}): Promise<Context> {
  const ctx = await makeContext(g, opts);
  const { ensurePrivateStore } = await import('../store/private.js');
  await ensurePrivateStore(ctx.store, (m) => ctx.out.warn(m));
  return ctx;
}
