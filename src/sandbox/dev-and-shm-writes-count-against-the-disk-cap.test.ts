/**
 * Every tmpfs of a sandbox is capped (issue 14): /dev/shm is a directory of the upper dir, so what
 * a task writes there counts against --disk, and /dev itself holds only the runtime's nodes (a
 * small cap). Before, /dev was an uncapped tmpfs: 1 GiB went into /dev/shm under --disk 64m.
 * As root and as an unprivileged user.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdirSync, symlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureTestUser } from '../../test/helpers/test-user.js';

const run = promisify(execFile);
const CLI = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
const USER = 'msbshm';
let work: string;

async function cli(args: string[], as?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const store = join(work, as === undefined ? 'root-store' : 'home/store');
  const argv = [CLI, '--registry', join(work, 'reg'), '--store', store, ...args];
  const [cmd, ...rest] =
    as === undefined ? argv : ['runuser', '-u', as, '--', 'env', `HOME=${join(work, 'home')}`, `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`, ...argv];
  try {
    const r = await run(cmd!, rest, { cwd: work, timeout: 120_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

/** Writes 1 GiB into /dev/shm and 8 MiB into /dev; prints each dd's status. */
const FILL =
  'dd if=/dev/zero of=/dev/shm/big bs=1M count=1024 2>/dev/null; echo shm=$?; dd if=/dev/zero ' +
  'of=/dev/big bs=1M count=8 2>/dev/null; echo dev=$?; du -sm /dev/shm | cut -f1';

beforeAll(async () => {
  const { uid } = await ensureTestUser(USER, 600_000, { compileHelpers: true });
  work = await mkdtemp(join(tmpdir(), 'msb-shm-'));
  chmodSync(work, 0o755);
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(tree, 'bin/busybox'));
  symlinkSync('busybox', join(tree, 'bin/sh'));
  const imported = await cli(['import', tree, '--tag', 'shm/busybox']);
  expect(imported.code, imported.stderr).toBe(0);
  await run('chmod', ['-R', 'a+rX', join(work, 'reg')]);
  mkdirSync(join(work, 'home'));
  chownSync(join(work, 'home'), uid, uid);
}, 120_000);

afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe('writes to /dev and /dev/shm', () => {
  for (const who of ['root', USER]) {
    it(`fail once the sandbox's --disk budget is used up (${who})`, async () => {
      const as = who === 'root' ? undefined : who;
      const r = await cli(['run', '--disk', '64m', 'shm/busybox', '--', '/bin/sh', '-c', FILL], as);
      expect(r.code, r.stderr).toBe(0);
      const [shm, dev, mib] = r.stdout.trim().split('\n');
      expect(shm).toBe('shm=1');
      expect(dev).toBe('dev=1');
      // what went in before the cap: the upper's 64 MiB, not the GiB asked for
      expect(Number(mib)).toBeLessThanOrEqual(64);
    }, 180_000);
  }
});
