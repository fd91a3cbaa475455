/** An interactive shell in a sandbox, attached to the caller's terminal. */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { checkExecFits, checkLauncherFits } from '../sandbox/arg-max.js';
import { HOST_PATH, commandEnv, enterCommand } from '../sandbox/commands.js';
import type { Sandbox } from '../sandbox/index.js';

/**
 * The launcher command for `argv` in the sandbox. `terminal`: the command gets a terminal of the
 * sandbox's own (relayed to ours), so job control and Ctrl-C act inside instead of ending it.
 */
export function attachCommand(sb: Sandbox, argv: string[], terminal: boolean): { cmd: string[]; initPid: number } {
  const spec = sb.enterSpec(argv, { env: { TERM: process.env.TERM ?? 'xterm' } });
  checkExecFits(argv, commandEnv(spec.env));
  const cmd = enterCommand(spec);
  if (terminal) cmd.splice(cmd.indexOf('--'), 0, '--pty', '1');
  // spawned directly: the launcher's own exec carries the command's argv and variables
  checkLauncherFits(cmd, { PATH: HOST_PATH }, 'env');
  return { cmd, initPid: spec.initPid };
}

/** Runs `argv` in the sandbox with the caller's stdin/stdout/stderr; resolves to its exit code. */
export async function attach(sb: Sandbox, argv: string[]): Promise<number> {
  const { cmd, initPid } = attachCommand(sb, argv, process.stdin.isTTY && process.stdout.isTTY);
  const pidnsFd = openSync(`/proc/${initPid}/ns/pid`, 'r');
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['inherit', 'inherit', 'inherit', 'pipe', pidnsFd], env: { PATH: HOST_PATH } });
  closeSync(pidnsFd);
  // The launcher reports on fd 3; nothing here needs it, but the pipe must be read.
  (child.stdio[3] as NodeJS.ReadableStream).resume();
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128 + 9)));
  });
}
