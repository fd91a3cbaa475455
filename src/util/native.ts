/**
 * Small native helpers (native/<name>.c) compiled on first use with the system C compiler (the
 * same one npm uses for zstd-napi) into native/build/<name>-<hash of the source>: an edited source
 * never runs a stale binary. Compiled under a temporary name and renamed, so racing processes are
 * harmless.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { access, mkdir, readFile, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { HostCapabilityError } from '../errors.js';

/** native/ at the package root: two levels up from src/util/, one from the bundled dist/. */
const here = dirname(fileURLToPath(import.meta.url));
const nativeDir = [join(here, '..', '..', 'native'), join(here, '..', 'native')].find((d) => existsSync(d)) ?? join(here, '..', '..', 'native');

/** Path of the compiled helper `name`, compiling native/<name>.c first if needed. */
export async function nativeHelper(name: string): Promise<string> {
  const source = join(nativeDir, `${name}.c`);
  const tag = createHash('sha256').update(await readFile(source)).digest('hex').slice(0, 12);
  const binary = join(nativeDir, 'build', `${name}-${tag}`);
  try {
    await access(binary);
    return binary;
  } catch {
    // compile below
  }
  await mkdir(dirname(binary), { recursive: true });
  const tmp = `${binary}.${process.pid}.${randomBytes(4).toString('hex')}`;
  try {
    await promisify(execFile)('cc', ['-O2', '-Wall', '-o', tmp, source]);
    await rename(tmp, binary);
  } catch (e) {
    await rm(tmp, { force: true });
    throw new HostCapabilityError(`cannot compile native/${name}.c: ${(e as Error).message}`, 'install a C compiler (Debian: apt-get install gcc libc6-dev) and retry');
  }
  return binary;
}
