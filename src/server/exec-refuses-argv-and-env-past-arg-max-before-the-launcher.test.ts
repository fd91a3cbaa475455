/**
 * The limit on a command's argv and environment is the kernel's for one exec (ARG_MAX, as
 * arg-max.ts computes it for this process) and nothing of ours: a command that fills it to the
 * byte runs, one byte more is refused 422 INVALID_INPUT naming the field (`argv`, `argv.N`,
 * `command`, `env`, `env.NAME`) before anything reaches the launcher, for a plain exec, a job
 * (no job is made) and a create's env; the SWE-ReX face raises what Python's subprocess.run
 * would (OSError E2BIG, ValueError). A sentinel sandbox answers throughout. Real HTTP, real sandboxes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { argMax, EXEC_RESERVE, envStrings, MAX_ARG_STRLEN, stringsBytes } from '../sandbox/arg-max.js';
import { commandEnv } from '../sandbox/commands.js';

const fx = new ServerFixture();
let sentinel: string;
let id: string;
beforeAll(async () => {
  await fx.setUp();
  sentinel = await fx.create();
  id = await fx.create();
}, 120_000);
afterAll(() => fx.tearDown());

const exec = (body: Record<string, unknown>, async = false) => fx.call('POST', `/v1/sandboxes/${id}/exec${async ? '?async=true' : ''}`, body);

async function expectRefused(r: Awaited<ReturnType<typeof exec>>, field: string, says: RegExp): Promise<void> {
  expect(r.status, r.text).toBe(422);
  expect(r.json().error).toMatchObject({ code: 'INVALID_INPUT', field });
  expect((r.json().error as { message: string }).message).toMatch(says);
  const alive = await fx.call('POST', `/v1/sandboxes/${sentinel}/exec`, { command: 'echo alive' });
  expect(alive.json()).toMatchObject({ outcome: 'ok', stdout: 'alive\n' });
}

/** An argv that, with the sandbox's environment (the fixture's GREETING, PATH, HOME), takes exactly `bytes` of one exec. */
function argvOf(bytes: number): string[] {
  const head = ['/bin/sh', '-c', 'echo "$# ${#1}"', 'sh'];
  const piece = MAX_ARG_STRLEN - 1 - 8; // with its NUL and pointer, a piece takes MAX_ARG_STRLEN - 8 bytes
  const argv = [...head];
  let left = bytes - stringsBytes(head) - stringsBytes(envStrings(commandEnv({ GREETING: 'hello' })));
  while (left > piece + 9) {
    argv.push('x'.repeat(piece - 9));
    left -= piece;
  }
  argv.push('y'.repeat(left - 9));
  return argv;
}

describe("the kernel's limit for one exec", () => {
  const room = argMax() - EXEC_RESERVE;

  it('runs a command that fills it to the byte, and refuses one byte more, naming argv', async () => {
    const fits = argvOf(room);
    const r = await exec({ argv: fits });
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    expect(r.json()).toMatchObject({ outcome: 'ok', exit_code: 0, stdout: `${fits.length - 4} ${fits[4]!.length}\n` });
    await expectRefused(await exec({ argv: argvOf(room + 1) }), 'argv', /ARG_MAX/);
    // a job past it is refused the same way, and none is made
    await expectRefused(await exec({ argv: argvOf(room + 1) }, true), 'argv', /ARG_MAX/);
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs`)).json()).toEqual({ jobs: [] });
  });

  it('names the string at fault: one argument or variable past MAX_ARG_STRLEN, a NUL, a shell command', async () => {
    const long = 'z'.repeat(MAX_ARG_STRLEN);
    await expectRefused(await exec({ argv: ['/bin/echo', 'ok', long] }), 'argv.2', /MAX_ARG_STRLEN/);
    await expectRefused(await exec({ argv: ['/bin/echo', 'a\0b'] }), 'argv.1', /NUL/);
    await expectRefused(await exec({ command: `echo ${long}` }), 'command', /MAX_ARG_STRLEN/);
    await expectRefused(await exec({ command: 'true', env: { BIG: long } }), 'env.BIG', /MAX_ARG_STRLEN/);
    await expectRefused(await exec({ command: 'true', env: { V: 'a\0b' } }), 'env.V', /NUL/);
    // variables that are each fine but together past the limit are the environment's fault
    const many = Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`V${i}`, 'v'.repeat(100 << 10)]));
    await expectRefused(await exec({ command: 'true', env: many }), 'env', /ARG_MAX/);
  });

  it('refuses a create whose env leaves no room for a command, before any sandbox is made', async () => {
    const many = Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`V${i}`, 'v'.repeat(100 << 10)]));
    const before = (await fx.call('GET', '/v1/sandboxes')).json().sandboxes as unknown[];
    const r = await fx.call('POST', '/v1/sandboxes', { ref: 'srv/busybox', env: many });
    await expectRefused(r, 'env', /ARG_MAX/);
    expect((await fx.call('GET', '/v1/sandboxes')).json().sandboxes).toHaveLength(before.length);
  });

  it('answers on the SWE-ReX face as subprocess.run raises: OSError E2BIG, ValueError for a NUL or a bad name', async () => {
    const rex = (body: Record<string, unknown>) => fx.call('POST', `/swerex/${id}/execute`, body);
    const tooLong = await rex({ command: argvOf(room + 1) });
    expect([tooLong.status, tooLong.json().swerexception]).toMatchObject([
      511,
      { class_path: 'builtins.OSError', message: "[Errno 7] Argument list too long: '/bin/sh'" },
    ]);
    const nul = await rex({ command: ['echo', 'a\0b'] });
    expect([nul.status, nul.json().swerexception]).toMatchObject([511, { class_path: 'builtins.ValueError', message: 'embedded null byte' }]);
    const name = await rex({ command: 'true', shell: true, env: { 'A=B': 'c' } });
    expect([name.status, name.json().swerexception]).toMatchObject([511, { class_path: 'builtins.ValueError', message: 'illegal environment variable name' }]);
    expect((await rex({ command: 'echo "$V"', shell: true, env: { V: 'fine' } })).json()).toMatchObject({ stdout: 'fine\n', exit_code: 0 });
  });
});
