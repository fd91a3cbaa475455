/**
 * A command in a sandbox whose stdin and stdout are streams with backpressure (a tar of a large
 * directory goes to an HTTP client at the client's pace, never whole in memory). Spawned directly
 * through the launcher, as `shell` does: the launcher server relays output without backpressure.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { checkExecFits, checkLauncherFits } from './arg-max.js';
import { HOST_PATH, commandEnv, enterCommand } from './commands.js';
import { trySignal } from './proc.js';
import type { Sandbox } from './sandbox.js';

export interface StreamedCommand {
  stdout: Readable;
  /** Its exit code (null when it was killed or never started) and the first 8 KiB of its stderr. */
  done: Promise<{ exitCode: number | null; stderr: string }>;
  /** Ends it and everything it started (nothing once it has ended). */
  kill(): void;
}

export function streamInSandbox(sb: Sandbox, argv: string[], opts: { stdin?: Readable; timeoutMs: number; signal?: AbortSignal }): StreamedCommand {
  const spec = sb.enterSpec(argv);
  checkExecFits(argv, commandEnv(spec.env));
  const cmd = enterCommand(spec);
  // spawned directly: the launcher's own exec carries the command's argv and variables
  checkLauncherFits(cmd, { PATH: HOST_PATH }, 'env');
  const pidnsFd = openSync(`/proc/${spec.initPid}/ns/pid`, 'r');
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(cmd[0]!, cmd.slice(1), { stdio: [opts.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe', 'pipe', pidnsFd], env: { PATH: HOST_PATH } });
  } finally {
    closeSync(pidnsFd);
  }
  let status = '';
  let stderr = '';
  (child.stdio[3] as Readable).on('data', (c: Buffer) => {
    status += c.toString('utf8');
  });
  child.stderr!.on('data', (c: Buffer) => {
    if (stderr.length < 8192) stderr += c.toString('utf8');
  });
  // The command's own pid 1 (child-pid) takes everything it started with it. Once the command
  // has ended, its pids may belong to others: nothing is signalled then.
  let closed = false;
  const kill = (): void => {
    if (closed) return;
    const m = /"child-pid"\s*:\s*(\d+)/.exec(status);
    if (m !== null) trySignal(Number(m[1]), 'SIGKILL');
    child.kill('SIGKILL');
  };
  if (opts.stdin !== undefined) {
    child.stdin!.on('error', () => undefined);
    opts.stdin.on('error', kill);
    opts.stdin.pipe(child.stdin!);
  }
  const timer = setTimeout(kill, opts.timeoutMs);
  timer.unref();
  opts.signal?.addEventListener('abort', kill, { once: true });
  if (opts.signal?.aborted === true) kill();
  const done = new Promise<{ exitCode: number | null; stderr: string }>((resolve) => {
    child.on('error', (e) => {
      stderr += String(e);
      resolve({ exitCode: null, stderr });
    });
    child.on('close', () => {
      closed = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', kill);
      const m = /"exit-code"\s*:\s*(-?\d+)/.exec(status);
      resolve({ exitCode: m === null ? null : Number(m[1]), stderr });
    });
  });
  return { stdout: child.stdout!, done, kill };
}
