/** The CLI as people run it (bin/minisandbox), for tests of its output and exit codes. */
import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';

export const CLI = resolve('bin/minisandbox');

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with stdin closed and stdout/stderr as pipes (not a terminal); env: its whole environment (default ours). */
export function runCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<Ran> {
  return new Promise((done, fail) => {
    const child = spawn(CLI, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}

export interface RunningCli {
  child: ChildProcess;
  /** What it wrote so far. */
  stdout(): string;
  stderr(): string;
  /** Its end, as runCli gives it. */
  ended: Promise<Ran>;
}

/** Starts the CLI as runCli does, for a test that reads its output while it runs or signals it. */
export function startCli(args: string[], env: NodeJS.ProcessEnv = process.env): RunningCli {
  const child = spawn(CLI, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const ended = new Promise<Ran>((done, fail) => {
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
  return { child, stdout: () => stdout, stderr: () => stderr, ended };
}
