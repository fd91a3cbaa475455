/**
 * `minisandbox run` as a user meets it: the command's output reaches the terminal while it runs
 * (not once it ended), its stdin is the caller's, --json captures, Ctrl-C kills it and leaves
 * nothing behind; and a command handed the caller's terminal can neither push input into it
 * (TIOCSTI) nor make it its own: it is in a session of its own, as is everything of the sandbox.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { eventually } from '../../test/helpers/eventually.js';

const CLI = resolve('bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-cli-run-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
const registry = join(work, 'registry');
const store = join(work, 'store');
const REF = 'cli/terminal';

/**
 * Tries what a process may do to a terminal on its stdin only as a member of the terminal's
 * session: push a byte into its input, make it its controlling terminal, open /dev/tty.
 */
const TERMINAL_PROBE = `
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>
int main(void) {
  char c = '#';
  int sti = ioctl(0, TIOCSTI, &c);
  int sti_errno = sti < 0 ? errno : 0;
  int ctty = ioctl(0, TIOCSCTTY, 1);
  int tty = open("/dev/tty", O_RDWR);
  printf("isatty=%d tiocsti=%d/%d tiocsctty=%d devtty=%d own-session=%d\\n", isatty(0), sti, sti_errno, ctty, tty >= 0, getsid(0) == getpid());
  return 0;
}
`;

/** Runs argv with a new terminal as its stdio (and controlling terminal); what it wrote there, and its exit code. */
const PTY_DRIVER = `
import json, os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b''
while True:
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
print(json.dumps({'out': out.decode('utf8', 'replace'), 'code': os.waitstatus_to_exitcode(st)}))
`;

let probe: string;

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  writeFileSync(join(work, 'probe.c'), TERMINAL_PROBE);
  probe = join(work, 'terminal-probe');
  execFileSync('cc', ['-static', '-O2', '-o', probe, join(work, 'probe.c')]);
  mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
  execFileSync('cp', [probe, join(root, 'usr/local/bin/terminal-probe')]);
  await pushTree(new LocalRegistry(registry), new StorePaths(join(work, 'push')), root, { tag: REF });
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

function cliArgs(args: string[]): string[] {
  return ['--registry', registry, '--store', store, ...args];
}

function onTerminal(argv: string[]): { out: string; code: number } {
  const r = execFileSync('/usr/bin/python3', ['-c', PTY_DRIVER, ...argv], { timeout: 120_000 });
  return JSON.parse(r.toString()) as { out: string; code: number };
}

describe('run', () => {
  it("streams the command's output while it runs, and Ctrl-C kills it and removes its sandbox", async () => {
    const marker = String(700_000 + Math.floor(Math.random() * 99_999));
    const child = spawn(CLI, cliArgs(['run', REF, '--', '/bin/sh', '-c', `echo first; echo second >&2; exec sleep ${marker}`]), {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const closed = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
    await eventually(() => stdout.includes('first\n') && stderr.includes('second\n'));
    // the command is still sleeping: nothing waited for its end
    expect(child.exitCode).toBeNull();
    child.kill('SIGINT');
    // 128 + SIGINT, as shells and docker give
    expect(await closed).toBe(130);
    expect(stderr).toContain('command ended: killed (SIGINT)');
    expect(stdout).toBe('first\n');
    const left = execFileSync('ps', ['-eo', 'args']).toString();
    expect(left).not.toContain(`sleep ${marker}`);
    expect(readdirSync(new StorePaths(store).sandboxesDir)).toEqual([]);
  });

  it('passes its stdin to the command; --json captures the output instead', async () => {
    const piped = await new Promise<{ code: number | null; stdout: string }>((done) => {
      const child = spawn(CLI, cliArgs(['run', REF, '--', '/bin/sh', '-c', 'tr a-z A-Z']), { stdio: ['pipe', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('close', (code) => done({ code, stdout }));
      child.stdin.end('given input\n');
    });
    expect(piped).toEqual({ code: 0, stdout: 'GIVEN INPUT\n' });
    const json = execFileSync(CLI, cliArgs(['--json', 'run', '--max-output', '4', REF, '--', '/bin/sh', '-c', 'echo 123456789']), {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(JSON.parse(json.toString())).toMatchObject({ status: 'ok', exitCode: 0, stdout: '1234', stdoutTruncated: true });
  });

  it("gives the command the caller's terminal but no way into it: no TIOCSTI, no controlling terminal", () => {
    // The same probe outside any sandbox, in the terminal's session: there the calls succeed.
    const control = onTerminal([probe]);
    expect(control.out).toMatch(/isatty=1 tiocsti=0\/0 tiocsctty=0 devtty=1 own-session=1/);
    const r = onTerminal([CLI, ...cliArgs(['run', REF, '--', 'terminal-probe'])]);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toMatch(/isatty=1 tiocsti=-1\/1 tiocsctty=-1 devtty=0 own-session=1/);
  });
});
