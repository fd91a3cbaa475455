/**
 * Small native helpers (native/<name>.c) compiled on first use with the system C compiler (the
 * same one npm uses for zstd-napi) into native/build/<name>-<hash of the source>: an edited source
 * never runs a stale binary. Compiled under a temporary name and renamed, so racing processes are
 * harmless.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { HostCapabilityError } from '../errors.js';
import { isErrno } from './fs.js';
import { nodeCrypto, randomHex } from './lazy-crypto.js';

/**
 * native/ at the package root: two levels up from src/util/, one from the CLI bundle
 * dist/cli-bundle.cjs, three from the library's dist/lib/util/.
 */
const here = dirname(fileURLToPath(import.meta.url));
const nativeDir =
  [join(here, '..', '..', 'native'), join(here, '..', 'native'), join(here, '..', '..', '..', 'native')].find((d) => existsSync(join(d, 'sandbox-launch.c'))) ??
  join(here, '..', '..', 'native');

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
  /** What to install for it, for the error of a build that must have it. */
  needs: string;
}

/** The compiler failed (not the build dir): the source, its flags or the host's headers are at fault. */
class CompileError extends HostCapabilityError {}

/**
 * A failed build of an optional part is not retried for this long: a host without its headers
 * would otherwise run the compiler again for every helper it starts (every lay-out).
 */
const FEATURE_RETRY_MS = 10 * 60_000;

/** Path of the compiled helper `name`, compiling native/<name>.c first if needed. */
export async function nativeHelper(name: string): Promise<string> {
  return build(name, undefined);
}

/**
 * The helper `name` with `feature` built in if this host can compile it (`has`), else without.
 * A host lacking the feature's headers fails at the first #include; that failure is remembered
 * (beside where the binary would be) for FEATURE_RETRY_MS.
 */
export async function nativeHelperWith(name: string, feature: NativeFeature): Promise<{ path: string; has: boolean }> {
  try {
    return { path: await build(name, feature), has: true };
  } catch (e) {
    if (!(e instanceof CompileError)) throw e;
    return { path: await build(name, undefined), has: false };
  }
}

/**
 * A node addon (native/<name>.c against node's own headers, built as a shared object), or
 * undefined where this host cannot build one (no headers beside node, no compiler): callers then
 * do without it. A failed build is not retried for FEATURE_RETRY_MS.
 */
export async function nativeAddon(name: string, headers = join(dirname(process.execPath), '..', 'include', 'node')): Promise<string | undefined> {
  const napi: NativeFeature = { name: 'napi', cflags: ['-shared', '-fPIC', '-I', headers], libs: [], needs: `node's headers (${headers})` };
  try {
    return await build(name, napi);
  } catch (e) {
    if (e instanceof HostCapabilityError) return undefined;
    throw e;
  }
}

/** The files a source's text includes with `#include "name"` (beside it, in the order they appear). */
export function localIncludes(text: string): string[] {
  return [...text.matchAll(/^#include "([^"/]+)"/gm)].map((m) => m[1]!);
}

function unwritable(e: unknown): boolean {
  return isErrno(e, 'EACCES') || isErrno(e, 'EROFS') || isErrno(e, 'EPERM') || /Permission denied|Read-only file system/.test((e as Error).message);
}

/**
 * The binary's file name: the helper's name and a hash of its source, its parts and the feature.
 * The hash is remembered in a stamp beside the binaries with the feature's settings and the stat of every file it covers
 * (size, mtime and ctime in ns, inode), so a start whose sources are unchanged - every one but the
 * first - reads no source and loads no hashing code: what make does with mtimes, plus the inode and
 * ctime that an edit also changes.
 */
export function binaryName(name: string, feature: NativeFeature | undefined, where = { sources: nativeDir, builds: buildDirs() }): string {
  const base = feature === undefined ? name : `${name}-${feature.name}`;
  const stamps = where.builds.map((d) => join(d, `${base}.stamp`));
  const settings = feature === undefined ? '-' : JSON.stringify(feature);
  for (const stamp of stamps) {
    const tag = stampedTag(stamp, settings);
    if (tag !== undefined) return `${base}-${tag}`;
  }
  const source = join(where.sources, `${name}.c`);
  const text = readFileSync(source);
  // a source split into parts: an edited part must give a new binary too
  const files = [source, ...localIncludes(text.toString('utf8')).map((part) => join(where.sources, part))];
  const hash = nodeCrypto().createHash('sha256').update(text);
  for (const part of files.slice(1)) hash.update(readFileSync(part));
  if (feature !== undefined) hash.update(JSON.stringify(feature));
  const tag = hash.digest('hex').slice(0, 12);
  const body = `${tag}\n${settings}\n${files.map((f) => `${fileStamp(f)}\t${f}\n`).join('')}`;
  for (const stamp of stamps) {
    try {
      mkdirSync(dirname(stamp), { recursive: true });
      const tmp = `${stamp}.${process.pid}.${randomHex(4)}`;
      writeFileSync(tmp, body);
      renameSync(tmp, stamp);
      break;
    } catch {
      // not writable here: the next place, or hashing again next time
    }
  }
  return `${base}-${tag}`;
}

function fileStamp(path: string): string {
  const st = statSync(path, { bigint: true });
  return `${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.ino}`;
}

/** The tag a stamp holds if it was made with these settings and every file it lists is as it was then. */
function stampedTag(stamp: string, settings: string): string | undefined {
  let lines: string[];
  try {
    lines = readFileSync(stamp, 'utf8').split('\n');
  } catch {
    return undefined;
  }
  const tag = lines[0] ?? '';
  if (!/^[0-9a-f]{12}$/.test(tag) || lines[1] !== settings) return undefined;
  const files = lines.slice(2).filter((l) => l !== '');
  if (files.length === 0) return undefined;
  for (const line of files) {
    const tab = line.indexOf('\t');
    try {
      if (tab < 0 || fileStamp(line.slice(tab + 1)) !== line.slice(0, tab)) return undefined;
    } catch {
      return undefined;
    }
  }
  return tag;
}

async function build(name: string, feature: NativeFeature | undefined): Promise<string> {
  const source = join(nativeDir, `${name}.c`);
  const file = binaryName(name, feature);
  const binaries = buildDirs().map((d) => join(d, file));
  for (const binary of binaries) {
    try {
      accessSync(binary, constants.X_OK);
      return binary;
    } catch {
      // not compiled there
    }
  }
  const what = `native/${name}.c${feature === undefined ? '' : ` with ${feature.name}`}`;
  const hint = `install ${feature === undefined ? 'a C compiler (Debian: apt-get install gcc libc6-dev)' : feature.needs} and retry`;
  if (feature !== undefined) {
    for (const binary of binaries) {
      const failed = await stat(`${binary}.failed`).catch(() => undefined);
      if (failed !== undefined && Date.now() - failed.mtimeMs < FEATURE_RETRY_MS)
        throw new CompileError(`cannot compile ${what} (failed at ${failed.mtime.toISOString()})`, hint);
    }
  }
  let failure: unknown;
  for (const binary of binaries) {
    const tmp = `${binary}.${process.pid}.${randomHex(4)}`;
    try {
      await mkdir(dirname(binary), { recursive: true });
      await promisify(execFile)('cc', ['-O2', '-Wall', ...(feature?.cflags ?? []), '-o', tmp, source, ...(feature?.libs ?? [])]);
      await rename(tmp, binary);
      return binary;
    } catch (e) {
      await rm(tmp, { force: true }).catch(() => undefined);
      failure = e;
      // only an unwritable build dir is worth the next place; a compiler error would repeat there
      if (!unwritable(e)) {
        if (feature !== undefined) await writeFile(`${binary}.failed`, (e as Error).message).catch(() => undefined);
        throw new CompileError(`cannot compile ${what}: ${(e as Error).message}`, hint);
      }
    }
  }
  throw new HostCapabilityError(`cannot compile ${what}: ${(failure as Error).message}`, hint);
}
