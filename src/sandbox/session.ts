/**
 * A persistent shell inside a sandbox for an agent's many commands: cwd, variables and activated
 * venvs carry over. The end of each command is a line carrying a random per-command nonce (never
 * prompt matching); a timeout interrupts the command's processes (SIGINT, then SIGKILL) and keeps
 * the shell; if the shell itself is stuck or gone it is restarted and the next command says so.
 */
import { checkExecFits } from './arg-max.js';
import { commandEnv, type EnterSpec } from './commands.js';
import { enterServed, type ServedProcess } from './launcher-server.js';
import { oomKills } from './cgroup.js';
import { DEFAULT_MAX_OUTPUT_BYTES, infraErrorOutcome, SentinelScanner, signalFromExitCode, type CommandOutcome } from './outcome.js';
import { descendantsOf, sameProcessAlive, trySignal } from './proc.js';
import { MinisandboxError } from '../errors.js';
import { nodeCrypto } from '../util/lazy-crypto.js';
import type { ByteGrant } from '../util/byte-budget.js';

export interface SessionRunOptions {
  timeoutMs?: number;
  maxOutputBytes?: number;
  /** Interrupts the command (as a timeout does: SIGINT, then SIGKILL); the outcome is `killed`. */
  signal?: AbortSignal;
  /** The command's stderr goes to its stdout, in the order written (as a terminal shows them); stderr is then empty. */
  mergeStderr?: boolean;
  /** Where output past each stream's first CAPTURE_FLOOR_BYTES is granted from (see ExecOptions.outputBudget). */
  outputBudget?: ByteGrant;
}

export interface SessionOptions {
  /** How long an interrupted command gets to end after SIGINT, and again after SIGKILL. */
  interruptGraceMs?: number;
  defaultTimeoutMs?: number;
  maxOutputBytes?: number;
  oomFile?: string | undefined;
}

/** Bash when the image has it, else the image's sh. */
const SHELL_ARGV = ['/bin/sh', '-c', 'if [ -x /bin/bash ]; then exec /bin/bash --noprofile --norc; fi; exec /bin/sh'];

/**
 * ANSI-C quoting ($'...'), understood by bash and busybox ash: any bytes survive intact. Bytes of
 * `alsoEscape` are written as \xNN too (e.g. `!`, which an interactive bash's history expansion would see).
 */
export function ansiQuote(s: string, alsoEscape = ''): string {
  let out = "$'";
  for (const b of Buffer.from(s, 'utf8')) {
    if (b === 0x27) out += "\\'";
    else if (b === 0x5c) out += '\\\\';
    else if (b >= 0x20 && b < 0x7f && !alsoEscape.includes(String.fromCharCode(b))) out += String.fromCharCode(b);
    else out += `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return `${out}'`;
}

/** The text written to the shell for one command. */
export function commandScript(cmd: string, nonce: string, mergeStderr = false): string {
  // stdin is /dev/null so a command cannot eat the protocol stream; eval keeps state in this shell;
  // `command` stops a POSIX sh (busybox ash) from exiting on a syntax error inside the eval.
  const run = `command eval ${ansiQuote(cmd)} </dev/null${mergeStderr ? ' 2>&1' : ''}`;
  return `${run}
__msb_rc=$?; printf '\\n__MSB_%s_%d__\\n' ${nonce} "$__msb_rc"; printf '\\n__MSB_%s__\\n' ${nonce} >&2\n`;
}

/**
 * Random bytes for command nonces, drawn 256 nonces at a time: a draw per command was one of the
 * larger items in profiles of a session round trip (tens of microseconds on a busy host).
 */
let noncePool = Buffer.alloc(0);
let nonceAt = 0;
function newNonce(): string {
  if (nonceAt + 12 > noncePool.length) {
    noncePool = nodeCrypto().randomBytes(12 * 256);
    nonceAt = 0;
  }
  nonceAt += 12;
  return noncePool.toString('hex', nonceAt - 12, nonceAt);
}

interface Pending {
  out: SentinelScanner;
  err: SentinelScanner;
  outDone: { offset: number; code: number } | undefined;
  errDone: number | undefined;
  wake: () => void;
}

export class Session {
  private child: ServedProcess | undefined;
  /** Host pid of the session's own pid 1 (its pid namespace nests in the sandbox's). */
  private initPid: number | undefined;
  private pending: Pending | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** Set when the shell had to be restarted: shell state from before is gone. */
  restarts = 0;

  constructor(
    private readonly spec: () => EnterSpec,
    private readonly opts: SessionOptions = {},
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  private start(): ServedProcess {
    const spec = this.spec();
    if (!sameProcessAlive(spec.initPid, undefined))
      throw new MinisandboxError('SANDBOX_DESTROYED', `the sandbox is not running (its init, pid ${spec.initPid}, is gone)`, { hint: 'create a new sandbox' });
    // the sandbox's environment was checked at its create; this holds for any spec it is given
    checkExecFits(SHELL_ARGV, commandEnv(spec.env));
    const child = enterServed({ ...spec, argv: SHELL_ARGV }, { stdin: true });
    child.stdin!.on('error', () => undefined);
    child.stdout!.on('data', (c: Buffer) => this.onData('out', c));
    child.stderr!.on('data', (c: Buffer) => this.onData('err', c));
    let status = '';
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (c: Buffer) => {
      status += c.toString('utf8');
      const m = /"child-pid"\s*:\s*(\d+)/.exec(status);
      if (m !== null && this.child === child) this.initPid = Number(m[1]);
    });
    child.on('exit', () => {
      if (this.child === child) {
        this.child = undefined;
        this.initPid = undefined;
      }
      this.pending?.wake();
    });
    this.child = child;
    return child;
  }

  private onData(stream: 'out' | 'err', chunk: Buffer): void {
    const p = this.pending;
    if (p === undefined) return; // output of background jobs between commands is dropped
    if (stream === 'out' && p.outDone === undefined) {
      const hit = p.out.push(chunk);
      if (hit !== undefined) p.outDone = { offset: hit.offset, code: Number(hit.match[1]) };
    } else if (stream === 'err' && p.errDone === undefined) {
      const hit = p.err.push(chunk);
      if (hit !== undefined) p.errDone = hit.offset;
    }
    if (p.outDone !== undefined && p.errDone !== undefined) p.wake();
  }

  /** Runs one command in the persistent shell. Commands queue; one runs at a time. */
  run(cmd: string, opts: SessionRunOptions = {}): Promise<CommandOutcome> {
    const next = this.queue.then(() => this.runNow(cmd, opts));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async runNow(cmd: string, opts: SessionRunOptions): Promise<CommandOutcome> {
    if (this.closed) throw new MinisandboxError('SESSION_CLOSED', 'the session is closed', { hint: 'open a new session on a live sandbox' });
    const started = performance.now();
    const cap = opts.maxOutputBytes ?? this.opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const timeoutMs = opts.timeoutMs ?? this.opts.defaultTimeoutMs ?? 600_000;
    const grace = this.opts.interruptGraceMs ?? 1000;
    const nonce = newNonce();
    const oomBefore = await oomKills(this.opts.oomFile);
    let child = this.child;
    if (child === undefined) {
      try {
        child = this.start();
      } catch (e) {
        return infraErrorOutcome(started, `cannot start the session shell: ${String(e)}`);
      }
    }
    let wake: () => void = () => undefined;
    let woken = new Promise<void>((r) => (wake = r));
    const p: Pending = {
      out: new SentinelScanner(cap, new RegExp(`\\n__MSB_${nonce}_(\\d+)__\\n`), undefined, opts.outputBudget),
      err: new SentinelScanner(cap, new RegExp(`\\n__MSB_${nonce}__\\n`), undefined, opts.outputBudget),
      outDone: undefined,
      errDone: undefined,
      wake: () => wake(),
    };
    const rearm = (): void => {
      woken = new Promise<void>((r) => (wake = r));
    };
    this.pending = p;
    child.stdin!.write(commandScript(cmd, nonce, opts.mergeStderr === true));
    const finished = (): boolean => (p.outDone !== undefined && p.errDone !== undefined) || this.child !== child;
    const abortSignal = opts.signal;
    const onAbort = (): void => p.wake();
    abortSignal?.addEventListener('abort', onAbort, { once: true });
    /** `stopOnAbort`: the caller's signal ends the first wait, as its deadline would. */
    const waitFor = async (ms: number, stopOnAbort = false): Promise<boolean> => {
      const deadline = performance.now() + ms;
      while (!finished()) {
        if (stopOnAbort && abortSignal?.aborted === true) return false;
        const left = deadline - performance.now();
        if (left <= 0) return false;
        let t: NodeJS.Timeout | undefined;
        await Promise.race([woken, new Promise<void>((r) => (t = setTimeout(r, left)))]);
        clearTimeout(t);
        rearm();
      }
      return true;
    };
    let timedOut = false;
    let aborted = false;
    if (!(await waitFor(timeoutMs, true))) {
      aborted = abortSignal?.aborted === true;
      timedOut = !aborted;
      await this.interrupt(child, 'SIGINT');
      if (!(await waitFor(grace))) {
        await this.interrupt(child, 'SIGKILL');
        if (!(await waitFor(grace))) {
          this.kill(child);
          await waitFor(grace);
        }
      }
    }
    abortSignal?.removeEventListener('abort', onAbort);
    this.pending = undefined;
    const durationMs = performance.now() - started;
    const out = p.out.out.slice(p.outDone?.offset);
    const err = p.err.out.slice(p.errDone);
    const base = {
      durationMs,
      stdout: out.text,
      stderr: err.text,
      stdoutTruncated: out.truncated,
      stderrTruncated: err.truncated,
      ...((out.truncated && p.out.out.budgetCut) || (err.truncated && p.err.out.budgetCut) ? { budgetCut: true } : {}),
    };
    if (timedOut) return { status: 'timeout', exitCode: p.outDone?.code ?? null, signal: 'SIGINT', ...base };
    if (aborted) return { status: 'killed', exitCode: p.outDone?.code ?? null, signal: 'SIGINT', ...base };
    if (p.outDone === undefined) {
      // The shell ended (the command ran `exit`, or the shell was killed): the next run starts a new one.
      this.restarts++;
      const code = child.exitCode;
      const sig = child.signalCode;
      if ((await oomKills(this.opts.oomFile)) > oomBefore) return { status: 'oom', exitCode: code, signal: 'SIGKILL', ...base };
      return { status: code === null ? 'killed' : 'ok', exitCode: code, signal: sig, ...base };
    }
    const exitCode = p.outDone.code;
    const signal = signalFromExitCode(exitCode);
    if (signal === 'SIGKILL' && (await oomKills(this.opts.oomFile)) > oomBefore) return { status: 'oom', exitCode, signal, ...base };
    return { status: signal === null || signal === 'SIGINT' ? 'ok' : 'killed', exitCode, signal, ...base };
  }

  /**
   * Signals every process of the running command: all descendants of the session's pid-1 except the
   * shell itself. The runtime owns the sandbox's user namespace, so it may signal them directly.
   */
  private async interrupt(child: ServedProcess, signal: NodeJS.Signals): Promise<void> {
    const init = this.initPid;
    if (init === undefined || this.child !== child) return;
    const shellKids = await descendantsOf(init);
    const shell = shellKids[0];
    const victims = shellKids.filter((p) => p !== shell);
    if (victims.length === 0) {
      // The shell itself is busy (a loop in a builtin): interrupting it means losing it.
      this.kill(child);
      return;
    }
    for (const v of victims) trySignal(v, signal);
  }

  /**
   * Interrupts the running command (SIGINT to its processes, as Ctrl-C would), if any. The command
   * then ends with its own status; the shell and its state stay.
   */
  async interruptCurrent(signal: NodeJS.Signals = 'SIGINT'): Promise<void> {
    if (this.pending === undefined || this.child === undefined) return;
    await this.interrupt(this.child, signal);
  }

  private kill(child: ServedProcess): void {
    if (this.child === child && this.initPid !== undefined) trySignal(this.initPid, 'SIGKILL');
    try {
      child.kill('SIGKILL');
    } catch {
      // gone
    }
    if (this.child === child) {
      this.child = undefined;
      this.initPid = undefined;
    }
    this.restarts++;
  }

  close(): void {
    this.closed = true;
    if (this.child !== undefined) this.kill(this.child);
  }
}
