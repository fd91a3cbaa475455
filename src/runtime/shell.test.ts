/**
 * An interactive shell gets a terminal of the sandbox's own: Ctrl-C interrupts the job in the
 * foreground inside, not the shell (or the sandbox), and the shell has job control.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepInForeground, sleepMarker } from '../../test/helpers/sleep-marker.js';
import { HOST_PATH } from '../sandbox/commands.js';
import type { Sandbox } from '../sandbox/index.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { attachCommand } from './shell.js';

const kit = busyboxSandboxEnv();
let sb: Sandbox;

beforeAll(async () => {
  sb = await kit.create();
});
afterAll(async () => {
  await sb?.destroy();
});

describe('shell', () => {
  it('gets a terminal of its own: Ctrl-C stops the foreground job and the shell goes on', async () => {
    const { cmd, initPid } = attachCommand(sb, ['sh', '-i'], true);
    const pidnsFd = openSync(`/proc/${initPid}/ns/pid`, 'r');
    const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['pipe', 'pipe', 'pipe', 'pipe', pidnsFd], env: { PATH: HOST_PATH } });
    closeSync(pidnsFd);
    (child.stdio[3] as NodeJS.ReadableStream).resume();
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.resume();
    const waitFor = (text: string): Promise<void> => eventually(() => out.includes(text));
    child.stdin!.write('echo READY-$((20+1))\n');
    await waitFor('READY-21');
    // Ctrl-C once the sleep is the terminal's foreground job: a ^C that reaches the shell between
    // its echo and the sleep taking the terminal is held by the shell until the sleep ends (a
    // clean-clone run hung here); a sleep the test's timeout would cut, so only the interruption
    // lets AFTER-42 appear in time
    const marker = sleepMarker();
    child.stdin!.write(`echo SLEEPING-$((1+1)); sleep ${marker}; echo SLEPT-$((1+2))\n`);
    await waitFor('SLEEPING-2');
    await eventually(() => sleepInForeground(marker));
    child.stdin!.write('\x03');
    // The terminal flushes typed-ahead input when it turns ^C into SIGINT, and echoes ^C after that
    // flush: a line typed before the echo could be thrown away.
    await eventually(() => out.slice(out.indexOf('SLEEPING-2')).includes('^C'));
    child.stdin!.write('echo AFTER-$((40+2)); tty\n');
    // the tty's answer before typing on: a line typed ahead is echoed between the two outputs
    await eventually(() => /AFTER-42\r?\n\/dev\/pts\/\d+/.test(out));
    child.stdin!.end('exit 3\n');
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(code).toBe(3);
    expect(out).not.toContain('SLEPT-3');
    expect(out).toMatch(/AFTER-42\r?\n\/dev\/pts\/\d+/);
  }, 300_000);
});
