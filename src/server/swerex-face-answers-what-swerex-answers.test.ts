/**
 * The SWE-ReX face against SWE-ReX itself, over plain HTTP on a real serve whose environment is
 * busybox with this host's bash. Every session output below is what SWE-ReX's own LocalRuntime
 * (its pexpect BashSession, with this same bash, no TERM as in its containers) returned for the
 * same requests, byte for byte; execute and read_file decode as Python's subprocess and
 * Path.read_text do; an `inst:` key of a missing environment is a SWE-ReX exception.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addHostPrograms } from '../../test/helpers/host-programs.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { observation, SwerexClient } from '../../test/helpers/swerex-client.js';

const fx = new ServerFixture();
const client = new SwerexClient(
  () => fx.srv.url,
  () => fx.token,
);
const ok = client.ok.bind(client);
const raises = client.raises.bind(client);

beforeAll(async () => {
  await fx.pushBusybox(fx.reg, 'swx/bash', {}, (root) => addHostPrograms(root, ['/bin/bash']));
  fx.srv = await fx.serve();
  fx.token = readFileSync(join(fx.work, 'token'), 'utf8').trim();
}, 120_000);
afterAll(() => fx.tearDown());

const run = (key: string, command: string, more: Record<string, unknown> = {}) => ok(key, 'run_in_session', { command, ...more });

describe('the SWE-ReX face, as SWE-ReX answers', () => {
  it("reads a session's output from a terminal: bash interactive at 24x80, echo off, bytes decoded with backslashreplace", async () => {
    const key = 'inst:swx:bash';
    expect(await ok(key, 'create_session', {})).toEqual({ output: '', session_type: 'bash' });
    // a terminal turns LF into CRLF; SWE-ReX strips ANSI and turns CRLF back, so a printed CR stays
    expect(await run(key, 'printf "\\033[1;31mred\\033[0m\\r\\n"')).toEqual(observation('red\r\n', 0));
    expect(await run(key, 'printf "a\\xffb\\xe2\\x82\\r\\nc"')).toEqual(observation('a\\xffb\\xe2\\x82\r\nc', 0));
    expect(await run(key, 'echo $COLUMNS $LINES $-')).toEqual(observation('80 24 himBHs\n', 0));
    expect(await run(key, 'foo', { check: 'silent' })).toEqual(observation('bash: foo: command not found\n', 127));
    expect(await run(key, 'tty; [ -t 0 ] && echo terminal')).toEqual(observation('/dev/pts/0\nterminal\n', 0));
    expect(await ok(key, 'close')).toEqual({});
  }, 120_000);

  it('lets a program read the terminal until the timeout, and runs interactive commands, expect strings and interrupts as SWE-ReX', async () => {
    const key = 'inst:swx:bash';
    await ok(key, 'create_session', {});
    await raises(key, 'run_in_session', { command: 'read -r x', timeout: 0.5 }, 'swerex.exceptions.CommandTimeoutError');
    expect(await ok(key, 'run_in_session', { action_type: 'bash_interrupt' })).toEqual(observation('', 0));
    expect(await run(key, 'echo after; (exit 3)', { check: 'silent' })).toEqual(observation('after\n', 3));
    // a pager shows a screen (23 lines and its prompt) and waits for a key
    await raises(key, 'run_in_session', { command: 'seq 100 | more', timeout: 0.5 }, 'swerex.exceptions.CommandTimeoutError');
    const paged = await ok(key, 'run_in_session', { action_type: 'bash_interrupt' });
    expect(paged).toEqual(observation(`${Array.from({ length: 23 }, (_, i) => `${i + 1}\n`).join('')}--More--`, 0));
    expect(await run(key, 'echo x')).toEqual(observation('x\n', 0));

    const loop = 'while read -r -p ">>> " l && [ "$l" != quit ]; do echo "got $l"; done';
    const interactive = { is_interactive_command: true, expect: ['>>> '] };
    expect(await run(key, loop, interactive)).toEqual(observation('', 0, '>>> '));
    expect(await run(key, 'hello', interactive)).toEqual(observation('got hello', 0, '>>> '));
    expect(await run(key, 'quit', { is_interactive_quit: true })).toEqual(observation('', 0));
    expect(await run(key, 'echo back')).toEqual(observation('back\n', 0));
    // Ctrl-C at the prompt: readline echoes it
    expect(await ok(key, 'run_in_session', { action_type: 'bash_interrupt' })).toEqual(observation('^C', 0));
    // an expect string ends the wait; SWE-ReX then gets the exit code within a second, without the matched text
    expect(await run(key, 'printf "a\\n> b"; sleep 0.3; echo tail', { expect: ['> '], check: 'silent' })).toEqual(observation('a\nbtail\n', 0, '> '));
    expect(await run(key, 'echo $?')).toEqual(observation('0\n', 0));
    expect(await ok(key, 'close')).toEqual({});
  }, 120_000);

  it('executes with stdout and stderr decoded with backslashreplace, in exactly the environment given', async () => {
    const key = 'inst:swx:bash';
    expect(await ok(key, 'execute', { command: "printf 'o\\377'; printf 'e\\342\\202' >&2", shell: true })).toEqual({
      stdout: 'o\\xff',
      stderr: 'e\\xe2\\x82',
      exit_code: 0,
    });
    // subprocess.run(env=...) replaces the whole environment: no HOME, no PATH of ours
    expect(await ok(key, 'execute', { command: ['env'], env: { V: 'v' } })).toEqual({ stdout: 'V=v\n', stderr: '', exit_code: 0 });
    expect(await ok(key, 'execute', { command: ['env'], env: {} })).toEqual({ stdout: '', stderr: '', exit_code: 0 });
    // without env the command gets the environment's own, as SWE-ReX's server passes its own on
    expect((await ok(key, 'execute', { command: ['env'] })).stdout).toContain('HOME=/root\n');
    expect(await ok(key, 'close')).toEqual({});
  }, 120_000);

  it("reads a file with the errors handler asked for, and fails where Python's read_text or SWE-ReX's JSON answer fails", async () => {
    const key = 'inst:swx:bash';
    await ok(key, 'execute', { command: "printf 'a\\377b' > /tmp/bad.txt", shell: true });
    const read = (errors: string | null, encoding: string | null = null) => ({ path: '/tmp/bad.txt', errors, encoding });
    expect(await ok(key, 'read_file', read('backslashreplace'))).toEqual({ content: 'a\\xffb' });
    expect(await ok(key, 'read_file', read('replace'))).toEqual({ content: 'a\ufffdb' });
    expect(await ok(key, 'read_file', read('ignore'))).toEqual({ content: 'ab' });
    expect(await ok(key, 'read_file', read('backslashreplace', 'ascii'))).toEqual({ content: 'a\\xffb' });
    for (const errors of [null, 'strict']) {
      const strict = await raises(key, 'read_file', read(errors), 'builtins.UnicodeDecodeError');
      expect(strict.message).toBe("'utf-8' codec can't decode byte 0xff in position 1: invalid start byte");
    }
    // the surrogate decodes, and SWE-ReX's UTF-8 JSON answer cannot carry it
    const escaped = await raises(key, 'read_file', read('surrogateescape'), 'builtins.UnicodeEncodeError');
    expect(escaped.message).toBe("'utf-8' codec can't encode character '\\udcff' in position 13: surrogates not allowed");
    const unknown = await raises(key, 'read_file', read('no-such-handler'), 'builtins.LookupError');
    expect(unknown.message).toBe("unknown error handler name 'no-such-handler'");
    expect(await ok(key, 'close')).toEqual({});
  }, 120_000);

  it('answers an inst: key whose environment does not exist with a SWE-ReX exception that names it', async () => {
    const key = 'inst:swx:not-there';
    // is_alive answers for the server, as before (it never looks up an environment)
    expect(await ok(key, 'is_alive')).toEqual({ is_alive: true, message: '' });
    for (const [route, body] of [
      ['create_session', {}],
      ['execute', { command: 'true', shell: true }],
    ] as const) {
      const e = await raises(key, route, body, 'swerex.exceptions.DeploymentStartupError');
      expect(e.message).toContain('no environment swx/not-there for key inst:swx:not-there');
    }
    expect(fx.srv.manager.named(key)).toBeUndefined();
  }, 60_000);
});
