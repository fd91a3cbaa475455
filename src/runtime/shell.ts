/** An interactive shell in a sandbox, attached to the caller's terminal. */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { HOST_PATH, enterCommand } from '../sandbox/commands.js';
import type { Sandbox } from '../sandbox/index.js';

/** Runs `argv` in the sandbox with the caller's stdin/stdout/stderr; resolves to its exit code. */
export async function attach(sb: Sandbox, argv: string[]): Promise<number> {
  const spec = sb.enterSpec(argv, { env: { TERM: process.env.TERM ?? 'xterm' } });
  const cmd = enterCommand(spec);
  const pidnsFd = openSync(`/proc/${spec.initPid}/ns/pid`, 'r');
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['inherit', 'inherit', 'inherit', 'pipe', pidnsFd], env: { PATH: HOST_PATH } });
  closeSync(pidnsFd);
  // The launcher reports on fd 3; nothing here needs it, but the pipe must be read.
  (child.stdio[3] as NodeJS.ReadableStream).resume();
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128 + 9)));
  });
}
