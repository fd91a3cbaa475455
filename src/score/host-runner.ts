/**
 * An EvalRunner on the host itself, with no isolation: for tests, and as the benchmark's
 * "tests run directly" baseline. It writes the files, runs the script with bash in its own process
 * group (so a timeout kills every process the tests started), merges stdout and stderr at the file
 * descriptor level (so their interleaving is exact) and caps what it keeps.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { InvalidInputError } from '../errors.js';
import { createOutputCap } from './output-cap.js';
import type { EvalRunner, EvalRunResult } from './runner.js';

export interface HostRunnerOptions {
  /** Output kept at most (head and tail); default 16 MiB. */
  maxOutputBytes?: number;
  env?: NodeJS.ProcessEnv;
}

export function hostEvalRunner(options: HostRunnerOptions = {}): EvalRunner {
  const maxOutputBytes = options.maxOutputBytes ?? 16 * 1024 * 1024;
  return async (files, script, { timeoutMs }) => {
    for (const f of files) {
      if (!isAbsolute(f.path)) throw new InvalidInputError(`eval file path ${JSON.stringify(f.path)} is not absolute`, 'give absolute paths');
      await mkdir(dirname(f.path), { recursive: true });
      await writeFile(f.path, f.content);
    }
    const dir = await mkdtemp(join(tmpdir(), 'minisandbox-eval-'));
    try {
      const scriptPath = join(dir, 'eval.sh');
      await writeFile(scriptPath, script);
      return await runBash(scriptPath, timeoutMs, maxOutputBytes, options.env ?? process.env);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // ESRCH: the group is already gone.
  }
}

function runBash(scriptPath: string, timeoutMs: number, maxOutputBytes: number, env: NodeJS.ProcessEnv): Promise<EvalRunResult> {
  return new Promise((resolve) => {
    const cap = createOutputCap(maxOutputBytes);
    // `exec ... 2>&1` makes stderr the same pipe as stdout: one stream, in write order.
    const child = spawn('/bin/bash', ['-c', 'exec /bin/bash "$0" 2>&1', scriptPath], {
      detached: true,
      stdio: ['ignore', 'pipe', 'ignore'],
      env,
    });
    let timedOut = false;
    let exitCode: number | null = null;
    let settled = false;
    const finish = (status: EvalRunResult['status']) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(drainTimer);
      const out = cap.finish();
      resolve({ output: out.text, status, exitCode, truncated: out.truncated });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child.pid);
    }, timeoutMs);
    let drainTimer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (c: Buffer) => cap.push(c));
    child.on('error', (e) => {
      cap.push(Buffer.from(`\n[minisandbox: could not run bash: ${e.message}]\n`));
      finish('infra_error');
    });
    child.on('exit', (code) => {
      exitCode = code;
      // Background processes the tests left behind would hold the pipe open forever.
      killGroup(child.pid);
      // A process that escaped the group (setsid) may still hold the pipe: stop waiting after a grace period.
      drainTimer = setTimeout(() => {
        child.stdout.destroy();
        finish(timedOut ? 'timeout' : 'ok');
      }, 2000);
    });
    child.stdout.on('close', () => {
      if (exitCode !== null || child.exitCode !== null || child.signalCode !== null) finish(timedOut ? 'timeout' : 'ok');
      else child.once('exit', () => finish(timedOut ? 'timeout' : 'ok'));
    });
  });
}
