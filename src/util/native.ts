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

/** Path of the compiled helper `name`, compiling native/<name>.c first if needed. */
export async function nativeHelper(name: string): Promise<string> {
  const source = join(nativeDir, `${name}.c`);
  const tag = createHash('sha256').update(await readFile(source)).digest('hex').slice(0, 12);
  const binaries = buildDirs().map((d) => join(d, `${name}-${tag}`));
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
      await promisify(execFile)('cc', ['-O2', '-Wall', '-o', tmp, source]);
      await rename(tmp, binary);
      return binary;
    } catch (e) {
      await rm(tmp, { force: true }).catch(() => undefined);
      failure ??= e;
      // only an unwritable build dir is worth the next place; a compiler error would repeat there
      if (!isErrno(e, 'EACCES') && !isErrno(e, 'EROFS') && !isErrno(e, 'EPERM') && !/Permission denied|Read-only file system/.test((e as Error).message)) break;
    }
  }
  throw new HostCapabilityError(`cannot compile native/${name}.c: ${(failure as Error).message}`, 'install a C compiler (Debian: apt-get install gcc libc6-dev) and retry');
}
