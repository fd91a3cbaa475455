import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import type { Sandbox } from './index.js';
import { SentinelScanner } from './outcome.js';
import { ansiQuote } from './session.js';
import { run } from '../../test/helpers/sandbox-testkit.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';

const kit = busyboxSandboxEnv();
let sb: Sandbox;

beforeAll(async () => {
  sb = await kit.create({ maxOutputBytes: 64 * 1024 });
});
afterAll(async () => {
  await sb.destroy();
});

describe('session', () => {
  it('keeps cwd, variables and functions across commands, with exit codes and separate streams', async () => {
    const s = sb.newSession();
    expect(await s.run('mkdir -p /tmp/proj && cd /tmp/proj && export FOO="a b"; greet() { echo "hi $1"; }')).toMatchObject({ status: 'ok', exitCode: 0 });
    expect(await s.run('echo "$FOO" $(pwd); greet you; echo warn >&2; false')).toMatchObject({
      status: 'ok',
      exitCode: 1,
      stdout: 'a b /tmp/proj\nhi you\n',
      stderr: 'warn\n',
    });
    expect((await s.run('printf "no newline"')).stdout).toBe('no newline');
    // Quoting hazards and a syntax error do not derail the protocol.
    expect((await s.run(`echo '$(x)' "\\$HOME" 'it'"'"'s'`)).stdout).toBe("$(x) $HOME it's\n");
    expect((await s.run('if then fi')).exitCode).not.toBe(0);
    expect((await s.run('echo still "$FOO"')).stdout).toBe('still a b\n');
    // A command cannot read the protocol stream.
    expect((await s.run('cat; echo after-cat')).stdout).toBe('after-cat\n');
  });

  it('a timed-out command is interrupted and the session keeps its state', async () => {
    const s = sb.newSession({ interruptGraceMs: 500 });
    await s.run('export KEEP=1; cd /tmp');
    // a sleep the test's timeout would cut: only the interruption can end it in time
    const o = await s.run('sleep 600 && echo never', { timeoutMs: 300 });
    expect(o.status).toBe('timeout');
    expect(o.stdout).not.toContain('never');
    expect(await s.run('echo $KEEP $(pwd)')).toMatchObject({ status: 'ok', stdout: '1 /tmp\n' });
    expect(s.restarts).toBe(0);
    // A command that ignores SIGINT is killed after the grace period; the shell survives.
    const stubborn = await s.run("trap '' INT; sleep 30", { timeoutMs: 300 });
    expect(stubborn.status).toBe('timeout');
    expect((await s.run('echo $KEEP')).stdout).toBe('1\n');
  });

  it('a loop in the shell itself times out; the session restarts usable and says so', async () => {
    const s = sb.newSession({ interruptGraceMs: 300 });
    const o = await s.run('while :; do :; done', { timeoutMs: 300 });
    expect(o.status).toBe('timeout');
    expect(s.restarts).toBeGreaterThan(0);
    expect(await s.run('echo alive')).toMatchObject({ status: 'ok', stdout: 'alive\n' });
  });

  it('an output flood is truncated with a flag and the session goes on', async () => {
    const s = sb.newSession();
    const o = await s.run('yes 0123456789 | head -c 5000000; echo tail-marker >&2');
    expect(o.status).toBe('ok');
    expect(o.stdoutTruncated).toBe(true);
    expect(o.stdout.length).toBe(64 * 1024);
    expect(o.stderr).toBe('tail-marker\n');
    expect(o.stderrTruncated).toBe(false);
    expect((await s.run('echo next')).stdout).toBe('next\n');
  });

  it('exec: an infinite loop ends as timeout and leaves no process behind; output is capped too', async () => {
    const o = await sb.exec(['sh', '-c', 'sleep 1000 & while :; do :; done'], { timeoutMs: 400 });
    expect(o.status).toBe('timeout');
    const ps = await sb.exec(['sh', '-c', 'ps -o pid,comm']);
    expect(ps.stdout).not.toContain('sleep'); // the exec's own pid namespace died with it
    const flood = await sb.exec(['sh', '-c', 'yes | head -c 1000000'], { maxOutputBytes: 1000 });
    expect(flood).toMatchObject({ status: 'ok', exitCode: 0, stdoutTruncated: true });
    expect(flood.stdout.length).toBe(1000);
  });

  it('a session started in a shell whose command runs `exit` restarts on the next command', async () => {
    const s = sb.newSession();
    const o = await s.run('exit 4');
    expect(o.exitCode).toBe(4);
    expect((await s.run('echo back')).stdout).toBe('back\n');
  });
});

describe('session protocol helpers', () => {
  it('ansiQuote round-trips arbitrary bytes through a real shell', async () => {
    const nasty = 'a\'b\\c\n\t$x `y` \u00e9\u0001 "q"';
    const { stdout } = await run('bash', ['-c', `printf '%s' ${ansiQuote(nasty)}`]);
    expect(stdout).toBe(nasty);
  });

  it('finds a sentinel split across chunks and beyond the output cap', () => {
    const sc = new SentinelScanner(4, /\n__END_(\d+)__\n/);
    expect(sc.push(Buffer.from('abcdefgh\n__EN'))).toBeUndefined();
    const hit = sc.push(Buffer.from('D_3__\nrest'));
    expect(hit?.match[1]).toBe('3');
    expect(hit?.offset).toBe(8);
    expect(sc.out.slice(hit!.offset)).toEqual({ text: 'abcd', truncated: true });
  });
});

describe('session interrupt', () => {
  it('interruptCurrent stops the running command like Ctrl-C and keeps the shell', async () => {
    const s = sb.newSession();
    await s.run('export K=kept');
    const running = s.run('touch /tmp/interrupt-me; sleep 600; echo rc=$?');
    // interrupt the sleep itself, not the shell before it got there (however long that takes)
    await eventually(async () => (await sb.exec(['test', '-e', '/tmp/interrupt-me'])).exitCode === 0);
    await s.interruptCurrent();
    const o = await running;
    expect(o.status).toBe('ok');
    expect(o.stdout).toBe('rc=130\n');
    expect((await s.run('echo $K')).stdout).toBe('kept\n');
  });
});
