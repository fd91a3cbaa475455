/**
 * Runs one command inside a sandbox (through the launcher's `enter`) with a wall-clock timeout and capped
 * output, and classifies how it ended.
 */
import { readFileSync } from 'node:fs';
import type { ByteGrant } from '../util/byte-budget.js';
import { WORKDIR_FAILURE, type EnterSpec } from './commands.js';
import { enterServed, type ServedProcess } from './launcher-server.js';
import type { ChildProcess } from 'node:child_process';
import { oomKills } from './cgroup.js';
import { sameProcessAlive, trySignal } from './proc.js';
import { CappedBuffer, infraErrorOutcome, signalFromExitCode, type CommandOutcome } from './outcome.js';

export interface RunOptions {
  timeoutMs: number;
  maxOutputBytes: number;
  stdin?: Buffer | string | undefined;
  oomFile?: string | undefined;
  /** Aborts the command (e.g. the sandbox is being destroyed): status `killed`. */
  signal?: AbortSignal | undefined;
  /** Where output past each stream's first CAPTURE_FLOOR_BYTES is granted from (a server's budget). */
  outputBudget?: ByteGrant | undefined;
  /** The caller reads stdout as bytes (`RawOutcome.stdout`): the outcome's stdout text stays empty, one copy less. */
  rawStdout?: boolean | undefined;
}

export interface RawOutcome {
  outcome: CommandOutcome;
  /** The kept output as bytes, made on call (a copy of all of it; the outcome has it as UTF-8 text). */
  stdout: () => Buffer;
  stderr: () => Buffer;
}

export async function runInSandbox(spec: EnterSpec, opts: RunOptions): Promise<RawOutcome> {
  const started = performance.now();
  if (!sameProcessAlive(spec.initPid, undefined)) return infra(started, `sandbox is not running (its init, pid ${spec.initPid}, is gone)`);
  const oomBefore = await oomKills(opts.oomFile);
  const stdout = new CappedBuffer(opts.maxOutputBytes, opts.outputBudget);
  const stderr = new CappedBuffer(opts.maxOutputBytes, opts.outputBudget);
  let status = '';
  // Through the launcher server: no fork of the runtime itself per command.
  const child = enterServed(spec, { stdin: opts.stdin !== undefined });
  child.stdout!.on('data', (c: Buffer) => stdout.push(c));
  child.stderr!.on('data', (c: Buffer) => stderr.push(c));
  const statusPipe = child.stdio[3] as NodeJS.ReadableStream;
  statusPipe.on('data', (c: Buffer) => {
    status += c.toString('utf8');
  });
  if (opts.stdin !== undefined) {
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(opts.stdin);
  }
  const {
    code,
    signal: sig,
    timedOut,
    aborted,
  } = await awaitLauncher(child, {
    timeoutMs: opts.timeoutMs,
    signal: opts.signal,
    // The command's own pid 1 (reported as child-pid) ends the whole tree when killed (the kernel
    // kills every process of a pid namespace whose init dies).
    commandInit: () => childPid(status),
    onError: (e) => stderr.push(Buffer.from(`\n${String(e)}`)),
    // whatever the command left running (or a half-set-up pid 1) ends with it
    afterExit: () => killNestedInit(status, spec.initPid),
    detach: () => statusPipe.removeAllListeners('data'),
    complete: () => EXIT_CODE.test(status),
  });
  const durationMs = performance.now() - started;
  const out = opts.rawStdout === true ? { text: '', truncated: stdout.total > stdout.bytesKept } : stdout.slice();
  const err = stderr.slice();
  const base = {
    durationMs,
    stdout: out.text,
    stderr: err.text,
    stdoutTruncated: out.truncated,
    stderrTruncated: err.truncated,
    ...(stdout.budgetCut || stderr.budgetCut ? { budgetCut: true } : {}),
  };
  const outcome = await classifyEnding({ timedOut, aborted, status, code, signal: sig, stderr: err.text, oomFile: opts.oomFile, oomBefore }, base);
  return { outcome, stdout: () => stdout.bytes(), stderr: () => stderr.bytes() };
}

/** How a command's launcher ended, for classifyEnding. */
export interface Ending {
  timedOut: boolean;
  aborted: boolean;
  /** What the launcher wrote on its status fd. */
  status: string;
  /** The launcher's own exit. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The command's stderr as far as it was kept ('' when it went elsewhere). */
  stderr: string;
  oomFile: string | undefined;
  /** The cgroup's OOM kill count before the command started. */
  oomBefore: number;
}

type OutcomeBase = Pick<CommandOutcome, 'durationMs' | 'stdout' | 'stderr' | 'stdoutTruncated' | 'stderrTruncated' | 'budgetCut'>;

/** The outcome's status: timeout, killed by us, a command that never started, OOM, or its own end. */
export async function classifyEnding(e: Ending, base: OutcomeBase): Promise<CommandOutcome> {
  if (e.timedOut) return { status: 'timeout', exitCode: null, signal: 'SIGKILL', ...base };
  if (e.aborted) return { status: 'killed', exitCode: null, signal: 'SIGKILL', ...base };
  const m = EXIT_CODE.exec(e.status);
  if (m === null) {
    // The launcher reports an exit code only for a command that started: a failed setup (namespace
    // entry, chdir, exec of a missing program) is the runtime's or the caller's error, not the command's.
    // Its own exit status says which, as shells do: 127 program not found, 126 not runnable, else 125.
    return {
      status: 'infra_error',
      exitCode: e.code,
      signal: e.signal,
      ...base,
      error: `command could not be started in the sandbox: ${e.stderr.trim().slice(-500) || `exit ${e.code ?? e.signal}`}`,
    };
  }
  const exitCode = Number(m[1]);
  if (exitCode === 125 && e.stderr.startsWith(WORKDIR_FAILURE)) {
    return { status: 'infra_error', exitCode, signal: null, ...base, error: e.stderr.trim() };
  }
  const signal = signalFromExitCode(exitCode);
  if (signal === 'SIGKILL' && (await oomKills(e.oomFile)) > e.oomBefore) {
    return { status: 'oom', exitCode, signal, ...base };
  }
  return { status: signal === null ? 'ok' : 'killed', exitCode, signal, ...base };
}

/** SIGKILLs the command's pid 1 if it is still there (checked by its parent: the sandbox's init). */
/** The pid the launcher reported on its status fd as `child-pid`, if it has yet. */
export function childPid(status: string): number | undefined {
  const m = /"child-pid"\s*:\s*(\d+)/.exec(status);
  return m === null ? undefined : Number(m[1]);
}

/** The command's exit code in the launcher's status. */
const EXIT_CODE = /"exit-code"\s*:\s*(-?\d+)/;

/** How long a command's pipes are kept, once it has exited, for a status that lacks its exit-code. */
const STATUS_WAIT_MS = 30_000;

/** The launcher's own end, and whether we ended it. */
export interface LauncherEnd {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  aborted: boolean;
}

/**
 * Waits for a launcher process (a command through the launcher server, or a one-shot sandbox's own
 * launcher) to end, killing it when `timeoutMs` passes or `signal` fires: first the pid 1 the
 * launcher reported (`commandInit`), which takes every process of its pid namespace with it, then
 * the launcher, whose chain dies with it. Once it has exited, `afterExit` runs, the pipes get a
 * moment to drain (what arrived by its end is read first), and then they are cut (`detach` lets
 * go of any other) rather than waiting for holders of their other ends.
 */
export async function awaitLauncher(
  child: ChildProcess | ServedProcess,
  opts: {
    timeoutMs: number;
    signal?: AbortSignal | undefined;
    commandInit: () => number | undefined;
    onError: (e: Error) => void;
    afterExit?: () => Promise<void>;
    detach?: () => void;
    /**
     * Whether the launcher's status has all it will say (its exit-code): until it has, the pipes
     * are not cut, for up to STATUS_WAIT_MS (its close ends the wait sooner). Through the launcher
     * server, a command's last status frame can come well after its exit is reported, behind other
     * commands' output on the one pipe they share.
     */
    complete?: () => boolean;
  },
): Promise<LauncherEnd> {
  let timedOut = false;
  let aborted = false;
  const kill = (): void => {
    const init = opts.commandInit();
    if (init !== undefined && init > 0) trySignal(init, 'SIGKILL');
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  };
  const timer = setTimeout(() => {
    timedOut = true;
    kill();
  }, opts.timeoutMs);
  const onAbort = (): void => {
    aborted = true;
    kill();
  };
  opts.signal?.addEventListener('abort', onAbort);
  // a signal that fired before the command started sends no event
  if (opts.signal?.aborted === true) onAbort();
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
    let exited: [number | null, NodeJS.Signals | null] | undefined;
    child.on('error', (e: Error) => {
      opts.onError(e);
      resolve([null, null]);
    });
    child.on('exit', (c: number | null, s: NodeJS.Signals | null) => {
      exited = [c, s];
      void (opts.afterExit?.() ?? Promise.resolve()).then(() =>
        setTimeout(() => {
          const waitUntil = performance.now() + STATUS_WAIT_MS;
          // after this turn's I/O: a process stalled past the timer (a busy server) reads what
          // arrived meanwhile, such as the status' exit-code, before cutting the pipes
          const cut = (): void => {
            if (opts.complete !== undefined && !opts.complete() && performance.now() < waitUntil) {
              setTimeout(() => setImmediate(cut), 20).unref();
              return;
            }
            child.stdout?.destroy();
            child.stderr?.destroy();
            opts.detach?.();
            resolve(exited!);
          };
          setImmediate(cut);
        }, 500).unref(),
      );
    });
    child.on('close', (c: number | null, s: NodeJS.Signals | null) => resolve(exited ?? [c, s]));
  });
  clearTimeout(timer);
  opts.signal?.removeEventListener('abort', onAbort);
  return { code, signal, timedOut, aborted };
}

async function killNestedInit(status: string, sandboxInit: number): Promise<void> {
  const pid = childPid(status);
  if (pid === undefined) return;
  // synchronously: procfs is kernel memory, and this runs after every command (see oomKills)
  let stat = '';
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    // gone
  }
  const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  if (ppid === sandboxInit) trySignal(pid, 'SIGKILL');
}

function infra(started: number, error: string): RawOutcome {
  return { outcome: infraErrorOutcome(started, error), stdout: () => Buffer.alloc(0), stderr: () => Buffer.alloc(0) };
}
