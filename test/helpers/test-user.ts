/**
 * An unprivileged host user for the tests that run commands as one: made once (as root), given a
 * subordinate id range from `subidStart` unless useradd already allocated one (SUB_UID_* in
 * login.defs), and, with `compileHelpers`, the native helpers compiled by root as `bin/setup`
 * does, so that the user finds them.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ensureSubidRange } from '../../src/host/subid.js';
import { nativeHelper } from '../../src/util/native.js';

const run = promisify(execFile);

export async function ensureTestUser(name: string, subidStart: number, opts: { compileHelpers?: boolean } = {}): Promise<{ uid: number; gid: number }> {
  if (process.getuid?.() !== 0) throw new Error(`making the test user ${name} needs root`);
  const exists = await run('id', ['-u', name]).then(
    () => true,
    () => false,
  );
  if (!exists) await run('useradd', ['--no-create-home', '--shell', '/bin/sh', name]);
  const uid = Number((await run('id', ['-u', name])).stdout.trim());
  const gid = Number((await run('id', ['-g', name])).stdout.trim());
  await ensureSubidRange({ user: name, start: subidStart, count: 65536 });
  if (opts.compileHelpers === true) {
    await nativeHelper('fsmeta');
    await nativeHelper('sandbox-launch');
  }
  return { uid, gid };
}
