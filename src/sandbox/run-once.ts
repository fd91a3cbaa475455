/**
 * One command in a fresh sandbox that lives exactly as long as the command: the launcher's `run`
 * mode (native/sandbox-launch.c) makes the sandbox and runs the command in one process chain, with
 * no long-lived holder, no separate enter and no launcher server in between. The command's stdio
 * is the caller's own (`inherit`: output streams live, stdin passes through) or pipes read here
 * (`capture`, like exec). State file, cgroup, limits and teardown are createSandbox's (prepare.ts),
 * so a caller killed mid-run leaves what reapStaleSandboxes removes.
 */
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { mark } from '../util/timing.js';
import { HOST_PATH, RUN_STATUS_FD, runCommand } from './commands.js';
import { releaseFrozenLowers, retainFrozenLowers } from './frozen.js';
import { CappedBuffer, type CommandOutcome } from './outcome.js';
import { checkOneShotLine, oneShotCommand, prepareOneShot } from './one-shot.js';
import { endSandbox } from './prepare.js';
import { processStartTime } from './proc.js';
import { awaitLauncher, childPid, classifyEnding } from './runner.js';
import type { CreateHooks, SandboxOptions } from './sandbox.js';
import { writeState } from './state.js';

export interface RunOnceOptions {
  /** Wall-clock limit of the command (default: the options' commandTimeoutMs); status `timeout`. */
  timeoutMs?: number;
  /** Kills the command and everything it started; the outcome is then `killed`. */
  signal?: AbortSignal;
  env?: Record<string, string>;
  /** Its working directory (made if missing, as the sandbox's workdir is); default config.workdir. */
  workdir?: string;
  /** Run as this in-sandbox user instead of config.user. */
  user?: { uid: number; gid: number };
  /**
   * `inherit`: the command reads our stdin and writes our stdout and stderr directly (the outcome's
   * stdout and stderr are then empty). `capture` (default): kept, up to maxOutputBytes each, as exec does.
   */
  stdio?: 'inherit' | 'capture';
  /** capture only: the command's stdin; `inherit` passes ours; default none (/dev/null). */
  stdin?: string | Buffer | 'inherit';
  /** capture only: default the options' maxOutputBytes. */
  maxOutputBytes?: number;
}

/**
 * Runs `argv` in a new sandbox over `input`'s layers, which is gone when this resolves. hooks:
 * onCreated runs before the launcher does (to lease the layers), onDestroyed after the teardown.
 */
export async function runOnce(input: SandboxOptions, argv: string[], run: RunOnceOptions = {}, hooks: CreateHooks = {}): Promise<CommandOutcome> {
  const { opts, prepared: p } = await prepareOneShot('runOnce', input, argv, run, hooks);
  const { state } = p;
  retainFrozenLowers(opts.lowerDirs);
  try {
    // before the overlay is mounted: the layers must not be collected under it
    await hooks.onCreated?.(state);
    mark('run-once: lease taken');
    const capture = run.stdio !== 'inherit';
    const command = oneShotCommand(opts, p, run, argv);
    const argvFull = runCommand(p.spec, command);
    checkOneShotLine(argvFull, command);
    const stdin = !capture || run.stdin === 'inherit' ? 'inherit' : run.stdin === undefined ? 'ignore' : 'pipe';
    const out = capture ? 'pipe' : 'inherit';
    // A session of its own: a Ctrl-C at our terminal reaches us (we kill the command) and not the
    // launcher mid-way; the command is in a session of its own anyway.
    const started = performance.now();
    const child = spawn(argvFull[0]!, argvFull.slice(1), { stdio: [stdin, out, out, 'pipe'], env: { PATH: HOST_PATH }, detached: true });
    mark('run-once: launcher spawned');
    if (child.pid !== undefined) {
      state.holderPid = child.pid;
      state.holderStartTime = processStartTime(child.pid);
      writeState(opts.stateDir, state);
    }
    const maxOutputBytes = run.maxOutputBytes ?? opts.maxOutputBytes;
    const stdout = new CappedBuffer(maxOutputBytes);
    const stderr = new CappedBuffer(maxOutputBytes);
    child.stdout?.on('data', (c: Buffer) => stdout.push(c));
    child.stderr?.on('data', (c: Buffer) => stderr.push(c));
    if (child.stdin !== null) {
      // a pipe only for given input (see stdin above)
      child.stdin.on('error', () => undefined);
      child.stdin.end(run.stdin);
    }
    let status = '';
    const statusPipe = child.stdio[RUN_STATUS_FD] as Readable;
    statusPipe.on('data', (c: Buffer) => {
      status += c.toString('utf8');
      const init = childPid(status);
      if (init !== undefined && state.initPid === 0) {
        state.initPid = init;
        state.initStartTime = processStartTime(init);
        mark('run-once: command started');
      }
    });
    const {
      code,
      signal: sig,
      timedOut,
      aborted,
    } = await awaitLauncher(child, {
      timeoutMs: run.timeoutMs ?? opts.commandTimeoutMs,
      signal: run.signal,
      // its init takes every process of the sandbox with it
      commandInit: () => state.initPid,
      onError: (e) => stderr.push(Buffer.from(`\n${String(e)}`)),
    });
    mark('run-once: command done');
    const o = stdout.slice();
    const e = stderr.slice();
    const base = { durationMs: performance.now() - started, stdout: o.text, stderr: e.text, stdoutTruncated: o.truncated, stderrTruncated: e.truncated };
    return await classifyEnding({ timedOut, aborted, status, code, signal: sig, stderr: e.text, oomFile: p.cgroup?.oomFile, oomBefore: 0 }, base);
  } finally {
    await endSandbox(opts.stateDir, state, p.cgroup);
    await releaseFrozenLowers(opts.lowerDirs, state.idMap);
    await hooks.onDestroyed?.(state);
    mark('run-once: torn down');
  }
}
