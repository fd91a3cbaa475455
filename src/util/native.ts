/**
 * Small native helpers (native/<name>.c) compiled on first use with the system C compiler (the
 * same one npm uses for zstd-napi) into native/build/<name>-<hash of the source>: an edited source
 * never runs a stale binary. Compiled under a temporary name and renamed, so racing processes are
 * harmless.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { constants, existsSync } from 'node:fs';
import { access, mkdir, readFile, rename, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { HostCapabilityError } from '../errors.js';
import { isErrno } from './fs.js';

/** native/ at the package root: two levels up from src/util/, one from the bundled dist/. */
const here = dirname(fileURLToPath(import.meta.url));
const nativeDir = [join(here, '..', '..', 'native'), join(here, '..', 'native')].find((d) => existsSync(d)) ?? join(here, '..', '..', 'native');

/**
 * Where compiled helpers go: native/build beside the sources, or, for a user who may not write
 * there (a root-owned install), a cache dir of its own.
 */
function buildDirs(): string[] {
  const cache = process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache');
  return [join(nativeDir, 'build'), join(cache, 'minisandbox', 'native')];
}

/**
 * An optional part of a helper that needs more of the host than a C compiler (headers and
 * libraries of a Debian -dev package): built in when the host has them, left out otherwise.
 */
export interface NativeFeature {
  name: string;
  cflags: string[];
  libs: string[];
}

/** Path of the compiled helper `name`, compiling native/<name>.c first if needed. */
export async function nativeHelper(name: string): Promise<string> {
  return build(name, undefined);
}

/**
 * The helper `name` with `feature` built in if this host can compile it (`has`), else without.
 * A host lacking the feature's headers fails at the first #include, in a few milliseconds.
 */
export async function nativeHelperWith(name: string, feature: NativeFeature): Promise<{ path: string; has: boolean }> {
  try {
    return { path: await build(name, feature), has: true };
  } catch (e) {
    if (!(e instanceof HostCapabilityError) || /Permission denied|Read-only file system|EACCES|EROFS|EPERM/.test(e.message)) throw e;
    return { path: await build(name, undefined), has: false };
  }
}

async function build(name: string, feature: NativeFeature | undefined): Promise<string> {
  const source = join(nativeDir, `${name}.c`);
  const hash = createHash('sha256').update(await readFile(source));
  if (feature !== undefined) hash.update(JSON.stringify(feature));
  const tag = hash.digest('hex').slice(0, 12);
  const file = feature === undefined ? `${name}-${tag}` : `${name}-${feature.name}-${tag}`;
  const binaries = buildDirs().map((d) => join(d, file));
  for (const binary of binaries) {
    try {
      await access(binary, constants.X_OK);
      return binary;
    } catch {
      // not compiled there
    }
  }
  let failure: unknown;
  for (const binary of binaries) {
    const tmp = `${binary}.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      await mkdir(dirname(binary), { recursive: true });
      await promisify(execFile)('cc', ['-O2', '-Wall', ...(feature?.cflags ?? []), '-o', tmp, source, ...(feature?.libs ?? [])]);
      await rename(tmp, binary);
      return binary;
    } catch (e) {
      await rm(tmp, { force: true }).catch(() => undefined);
      failure ??= e;
      // only an unwritable build dir is worth the next place; a compiler error would repeat there
      if (!isErrno(e, 'EACCES') && !isErrno(e, 'EROFS') && !isErrno(e, 'EPERM') && !/Permission denied|Read-only file system/.test((e as Error).message)) break;
    }
  }
  const needs = feature === undefined ? 'a C compiler (Debian: apt-get install gcc libc6-dev)' : `what native/${name}.c's ${feature.name} part needs (Debian: apt-get install libzstd-dev libssl-dev)`;
  throw new HostCapabilityError(`cannot compile native/${name}.c${feature === undefined ? '' : ` with ${feature.name}`}: ${(failure as Error).message}`, `install ${needs} and retry`);
}
