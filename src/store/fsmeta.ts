/**
 * Bulk metadata application through native/fsmeta.c (see there for why it exists).
 * The helper is compiled on first use with the system C compiler (the same one npm uses
 * for zstd-napi), into native/build/, via a temporary name so racing compilers are harmless.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { access, mkdir, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { HostCapabilityError, MinisandboxError } from '../errors.js';

/** native/ at the package root: two levels up from src/store/, one from the bundled dist/. */
const here = dirname(fileURLToPath(import.meta.url));
const nativeDir = [join(here, '..', '..', 'native'), join(here, '..', 'native')].find((d) => existsSync(join(d, 'fsmeta.c'))) ?? join(here, '..', '..', 'native');
const helperPath = join(nativeDir, 'build', 'fsmeta');

export async function fsmetaPath(): Promise<string> {
  try {
    await access(helperPath);
    return helperPath;
  } catch {
    // compile below
  }
  await mkdir(dirname(helperPath), { recursive: true });
  const tmp = `${helperPath}.${process.pid}.${randomBytes(4).toString('hex')}`;
  try {
    await promisify(execFile)('cc', ['-O2', '-o', tmp, join(nativeDir, 'fsmeta.c')]);
    await rename(tmp, helperPath);
  } catch (e) {
    await rm(tmp, { force: true });
    throw new HostCapabilityError(`cannot compile native/fsmeta.c: ${(e as Error).message}`, 'install a C compiler (Debian: apt-get install gcc) and retry');
  }
  return helperPath;
}

type Path = string | Buffer;

/** Accumulates metadata operations and applies them in one helper process per flush. */
export class FsmetaBatch {
  private chunks: Buffer[] = [];
  private bytes = 0;

  get size(): number {
    return this.bytes;
  }

  private rec(op: string, path: Path, ...fields: string[]): void {
    const parts = [Buffer.from(op), typeof path === 'string' ? Buffer.from(path) : path, ...fields.map((f) => Buffer.from(f))];
    for (const p of parts) {
      this.chunks.push(p, NUL);
      this.bytes += p.length + 1;
    }
  }

  chown(path: Path, uid: number, gid: number): void {
    this.rec('O', path, String(uid), String(gid));
  }
  chmod(path: Path, mode: number): void {
    this.rec('M', path, mode.toString(8));
  }
  /** Sets atime and mtime to `ns` nanoseconds since the epoch, without following symlinks. */
  utimes(path: Path, ns: bigint): void {
    let sec = ns / 1_000_000_000n;
    let nsec = ns % 1_000_000_000n;
    if (nsec < 0n) {
      nsec += 1_000_000_000n;
      sec -= 1n;
    }
    this.rec('T', path, sec.toString(), nsec.toString());
  }
  setxattr(path: Path, name: string, value: Buffer): void {
    this.rec('X', path, name, value.toString('hex'));
  }
  mknod(path: Path, type: 'c' | 'b' | 'p', mode: number, major = 0, minor = 0): void {
    this.rec('N', path, type, mode.toString(8), String(major), String(minor));
  }

  async flush(): Promise<void> {
    if (this.bytes === 0) return;
    const data = this.chunks;
    this.chunks = [];
    this.bytes = 0;
    const helper = await fsmetaPath();
    await new Promise<void>((resolve, reject) => {
      const child = spawn(helper, [], { stdio: ['pipe', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d: Buffer) => {
        err += d.toString();
      });
      child.on('error', reject);
      child.on('close', (code) => {
        if (code === 0) resolve();
        else reject(new MinisandboxError('FS_METADATA', err.trim() || `fsmeta exited with ${code}`, { hint: 'check free space and permissions of the store directory' }));
      });
      child.stdin.on('error', () => {
        // reported through the exit code and stderr
      });
      child.stdin.end(Buffer.concat(data));
    });
  }
}

const NUL = Buffer.from([0]);
