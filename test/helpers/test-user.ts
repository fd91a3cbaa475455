/**
 * An unprivileged host user for the tests that run commands as one: made once (as root), given a
 * subordinate id range from `subidStart` unless useradd already allocated one (SUB_UID_* in
 * login.defs), and, with `compileHelpers`, the native helpers compiled by root as `bin/setup`
 * does, so that the user finds them.
 */
import { execFile } from 'node:child_process';
import { chown, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ensureSubidRange } from '../../src/host/subid.js';
import { nativeHelper } from '../../src/util/native.js';
import { REPO_ROOT } from './sandbox-testkit.js';

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

/**
 * Runs a TypeScript scenario (tsx) as the test user: in a work dir of the user's that others may
 * only traverse (0711), with `stateDir`, an empty
 * 0711 dir of the user's inside it, for its sandboxes. `scenario` gets the state dir and returns
 * the script's text, which prints its result as the last line of JSON. The caller removes `work`.
 */
export async function runScenarioAs(
  user: { name: string; uid: number; gid: number },
  prefix: string,
  scenario: (stateDir: string) => string,
): Promise<{ out: unknown; work: string; stateDir: string }> {
  const work = await mkdtemp(join(tmpdir(), prefix));
  const stateDir = join(work, 'state');
  await run('mkdir', ['-m', '0711', stateDir]);
  await chown(work, user.uid, user.gid);
  await run('chmod', ['0711', work]);
  await chown(stateDir, user.uid, user.gid);
  const script = join(work, 'scenario.mts');
  await writeFile(script, scenario(stateDir));
  await chown(script, user.uid, user.gid);
  const r = await run(
    'runuser',
    ['-u', user.name, '--', 'env', `HOME=${work}`, `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`, join(REPO_ROOT, 'node_modules/.bin/tsx'), script],
    { cwd: work, timeout: 120_000 },
  );
  return { out: JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') as unknown, work, stateDir };
}
