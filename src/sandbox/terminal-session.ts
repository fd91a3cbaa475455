/**
 * A persistent interactive bash on a terminal of the sandbox's own, driven as a program drives one
 * (pexpect): the terminal has echo off and a fixed size, bash reads its rc files and lines through
 * readline, and everything the terminal prints is one stream read up to the next match, so a
 * program reading the terminal (a pager, a REPL) waits for input as it would for a person.
 *
 * The shell's prompt is a marker carrying `$?` and a per-session nonce: the end of a command is the
 * next prompt, with its exit status (never the text of a prompt the command could print). A command
 * goes in as one line of printable ASCII (`eval $'...'`), so no byte of it is taken by readline
 * (a tab for completion, a control character) or by history expansion; a line given to `sendLine`
 * goes in as it is (input for whatever reads the terminal).
 *
 * A command can first be checked as `bash -n` would, by the shell itself (no process, no round
 * trip): parsed, with aliases and extglob off as in a non-interactive bash and errors silenced, as
 * the body of a function defined in a `case` item that never matches, then as the body of such an
 * item; only if both parse does it run, else the prompt says so. Nothing of a command runs while it
 * is parsed: to escape the wrappers early it would need an unbalanced `}` and after it an
 * unbalanced `esac` (an `esac`, `;;` or `)` alone is a syntax error inside the function's braces, a
 * `}` alone one inside the item).
 *
 * Not a Session: output is one stream (stderr is the same terminal) kept between calls, as a
 * terminal keeps it; what a call does not consume is the start of what the next one reads.
 */
import type { EnterSpec } from './commands.js';
import { enterServed, type ServedProcess } from './launcher-server.js';
import { descendantsOf, sameProcessAlive, trySignal } from './proc.js';
import { MinisandboxError } from '../errors.js';
import { nodeCrypto } from '../util/lazy-crypto.js';
import { Utf8StreamDecoder } from '../util/py-codec.js';
import { ansiQuote } from './session.js';

export interface TerminalSessionOptions {
  /** The terminal's size; pexpect's default, 24x80. */
  rows?: number;
  cols?: number;
  /** Added to the sandbox's environment for the shell. */
  env?: Record<string, string>;
  /** Text kept of what one call reads (the rest is dropped, the match still found). */
  maxOutputChars?: number;
  /** How the terminal's bytes become text; default UTF-8 with backslashreplace, as pexpect's. */
  decoder?: () => { push(chunk: Buffer): string; end(): string };
  /** Called when the session is closed. */
  onClose?: () => void;
}

/** What one `expect` found. */
export type ExpectOutcome =
  | {
      kind: 'match';
      /** Index of the pattern that matched first, or -1: the shell's prompt. */
      index: number;
      /** The text up to the match (consumed with it), and the match itself. */
      before: string;
      after: string;
      /** `$?` when the prompt matched, else null. */
      exitCode: number | null;
      /** The prompt ended a checked command that did not parse (it did not run). */
      syntaxError: boolean;
      truncated: boolean;
    }
  /** Nothing matched within the time: nothing was consumed. */
  | { kind: 'timeout' }
  /** The shell ended (exit, killed): `before` is what it printed last. */
  | { kind: 'eof'; before: string; truncated: boolean };

/** The shell: bash when the environment has it (on PATH, so `$0` is `bash`, as `env bash` gives). */
const SHELL_ARGV = ['/bin/sh', '-c', 'command -v bash >/dev/null 2>&1 || { echo "minisandbox: no bash in this environment" >&2; exit 127; }; exec bash'];
export const NO_BASH = 'minisandbox: no bash in this environment';

/**
 * The shell's side of a checked command (`__msb_k` holds it): a parse as bash -n's (both wrappers in
 * one eval: the second is parsed only if the first was), with the session's alias expansion and
 * extglob put back as they were; `__msb_v` (shown in the prompt) is E if it failed.
 */
const CHECK_FUNCTION = [
  '__msb_ok() {',
  '__msb_v=E',
  '__msb_a=0; [[ :$BASHOPTS: == *:expand_aliases:* ]] && __msb_a=1',
  '__msb_x=0; [[ :$BASHOPTS: == *:extglob:* ]] && __msb_x=1',
  'shopt -u extglob expand_aliases',
  'eval "case x in y) __msb_f() {',
  '$__msb_k',
  '',
  '}',
  ';; esac',
  'case x in y)',
  '$__msb_k',
  '',
  ';; esac" && __msb_v=',
  '((__msb_x)) && shopt -s extglob',
  '((__msb_a)) && shopt -s expand_aliases',
  '[[ -z $__msb_v ]]; } 2>/dev/null',
].join('\n');

/** Words bash reserves at the start of a command (where a plain word is otherwise a command name). */
const RESERVED = new Set([
  '!',
  'case',
  'coproc',
  'do',
  'done',
  'elif',
  'else',
  'esac',
  'fi',
  'for',
  'function',
  'if',
  'in',
  'select',
  'then',
  'time',
  'until',
  'while',
]);

/**
 * Text every bash parses, so a check has nothing to ask: blank lines and comments, or one line of
 * plain words (no quote, no operator, no expansion: `ls -la`, `cd /testbed`, `python x.py`) whose
 * first word is not reserved. bash -n passes these, silently.
 */
export function parsesAnywhere(command: string): boolean {
  if (command.split('\n').every((l) => /^[ \t]*(#.*)?$/.test(l))) return true;
  const m = /^[ \t]*([A-Za-z0-9_./:,+@%=-]+)([ \t]+[A-Za-z0-9_./:,+@%=-]+)*[ \t]*$/.exec(command);
  return m !== null && !RESERVED.has(m[1]!);
}

/** How far before new text a match may start: the prompt marker and most patterns fit in it. */
const RESCAN = 64 << 10;

export class TerminalSession {
  private child: ServedProcess | undefined;
  /** Host pid of the terminal's pid namespace's init: its other descendants are the shell and its jobs. */
  private initPid: number | undefined;
  private decoder: { push(chunk: Buffer): string; end(): string };
  /** Decoded and not yet consumed. */
  private text = '';
  private truncated = false;
  private wake: (() => void) | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private pendingOps = 0;
  private closed = false;
  private readonly nonce: string;
  /** The prompt the shell prints: PS1 is set to this text. */
  readonly ps1: string;
  private readonly promptRe: RegExp;
  private readonly maxChars: number;
  /** Times the shell had to be started again (its state from before is gone). */
  restarts = 0;
  private setupLine = '';

  constructor(
    private readonly spec: () => EnterSpec,
    private readonly opts: TerminalSessionOptions = {},
  ) {
    this.nonce = nodeCrypto().randomBytes(12).toString('hex');
    this.ps1 = `__MSB_${this.nonce}_$?_\${__msb_v-}__`;
    this.promptRe = new RegExp(`__MSB_${this.nonce}_(\\d+)_(E?)__`, 'g');
    this.maxChars = opts.maxOutputChars ?? 8 << 20;
    this.decoder = (opts.decoder ?? (() => new Utf8StreamDecoder()))();
  }

  get alive(): boolean {
    return this.child !== undefined;
  }

  /** Whether an operation runs or waits (an interrupt then acts on it instead of queueing). */
  get busy(): boolean {
    return this.pendingOps > 0;
  }

  /** Resolves once every operation given so far has ended. */
  idle(): Promise<void> {
    return this.queue.then(() => undefined);
  }

  /** Runs `fn` once every operation before it ended: one at a time, as one terminal allows. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.pendingOps++;
    const next = this.queue.then(fn).finally(() => this.pendingOps--);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /**
   * Starts the shell and gives it `setup` (a line run before the prompt is set, e.g. sourcing
   * startup files), then its prompt; the outcome of waiting for that first prompt.
   */
  async start(setup: string, timeoutMs: number): Promise<ExpectOutcome> {
    this.setupLine = setup;
    this.spawn();
    this.sendLine(`${setup === '' ? '' : `${setup} ; `}export PS1='${this.ps1}' PS2='' PS0=''; eval ${ansiQuote(CHECK_FUNCTION)}`);
    return this.expect([], timeoutMs);
  }

  /** Starts the shell again if it ended (same setup, its state lost); whether its prompt came. */
  async ensureShell(timeoutMs: number): Promise<boolean> {
    if (this.child !== undefined) return true;
    this.restarts++;
    return (await this.start(this.setupLine, timeoutMs)).kind === 'match';
  }

  private spawn(): void {
    if (this.closed) throw new MinisandboxError('SESSION_CLOSED', 'the session is closed', { hint: 'open a new session on a live sandbox' });
    const base = this.spec();
    if (!sameProcessAlive(base.initPid, undefined))
      throw new MinisandboxError('SANDBOX_DESTROYED', `the sandbox is not running (its init, pid ${base.initPid}, is gone)`, { hint: 'create a new sandbox' });
    const spec: EnterSpec = {
      ...base,
      env: { ...base.env, ...(this.opts.env ?? {}) },
      argv: SHELL_ARGV,
      terminal: { rows: this.opts.rows ?? 24, cols: this.opts.cols ?? 80, echo: false },
    };
    this.text = '';
    this.truncated = false;
    this.decoder = (this.opts.decoder ?? (() => new Utf8StreamDecoder()))();
    const child = enterServed(spec, { stdin: true });
    child.stdin!.on('error', () => undefined);
    // the terminal is stdout; stderr carries only the launcher's own errors, shown as the terminal would
    child.stdout!.on('data', (c: Buffer) => this.onData(child, c));
    child.stderr!.on('data', (c: Buffer) => this.onData(child, c));
    let status = '';
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (c: Buffer) => {
      status += c.toString('utf8');
      const m = /"child-pid"\s*:\s*(\d+)/.exec(status);
      if (m !== null && this.child === child) this.initPid = Number(m[1]);
    });
    child.on('exit', () => {
      if (this.child !== child) return;
      this.append(this.decoder.end());
      this.child = undefined;
      this.initPid = undefined;
      this.wake?.();
    });
    this.child = child;
  }

  private onData(child: ServedProcess, chunk: Buffer): void {
    if (this.child !== child) return;
    this.append(this.decoder.push(chunk));
    this.wake?.();
  }

  private append(s: string): void {
    if (s === '') return;
    this.text += s;
    // past the cap, keep the head and a window at the end where matches are still looked for
    if (this.text.length > this.maxChars + 2 * RESCAN) {
      this.text = this.text.slice(0, this.maxChars) + this.text.slice(-RESCAN);
      this.truncated = true;
    }
  }

  /** Writes a line as typed: input for the shell's readline or for the program reading the terminal. */
  sendLine(line: string): void {
    this.write(`${line}\n`);
  }

  /**
   * Gives the shell a command to run in itself (its state carries over), as one line it cannot
   * mistake. `checked`: only if it parses (see above); its prompt then says whether it did.
   * `$?` at its start is 0, as after SWE-ReX's exit-code echo.
   */
  sendCommand(command: string, opts: { checked?: boolean } = {}): void {
    const quoted = ansiQuote(command, '!');
    if (opts.checked !== true || parsesAnywhere(command)) this.write(`__msb_v=; eval ${quoted}\n`);
    else this.write(`__msb_k=${quoted}; __msb_ok && eval "$__msb_k"\n`);
  }

  /** A key with the Ctrl key held (c: interrupt, z: suspend), as the terminal's line discipline takes it. */
  sendControl(key: 'c' | 'z' | 'd'): void {
    this.write(String.fromCharCode(key.charCodeAt(0) - 96));
  }

  /** Typing into a shell that ended is lost, as on a terminal whose shell exited (see ensureShell). */
  private write(s: string): void {
    this.child?.stdin?.write(s);
  }

  /**
   * Waits until one of `patterns` or the prompt appears in what the terminal printed (the earliest
   * match wins, the first pattern on a tie, the prompt last, as pexpect's list), and consumes up to
   * its end. A timeout or an aborted `signal` consumes nothing.
   */
  async expect(patterns: RegExp[], timeoutMs: number, signal?: AbortSignal): Promise<ExpectOutcome> {
    const all = [...patterns.map((p) => new RegExp(p.source, p.flags.includes('g') ? p.flags : `${p.flags}g`)), this.promptRe];
    const deadline = performance.now() + timeoutMs;
    let from = 0;
    for (;;) {
      const found = this.search(all, from);
      if (found !== undefined) {
        const { index, m } = found;
        const before = this.text.slice(0, m.index);
        this.text = this.text.slice(m.index + m[0].length);
        const truncated = this.truncated;
        this.truncated = false;
        const isPrompt = index === all.length - 1;
        return {
          kind: 'match',
          index: isPrompt ? -1 : index,
          before,
          after: m[0],
          exitCode: isPrompt ? Number(m[1]) : null,
          syntaxError: isPrompt && m[2] === 'E',
          truncated,
        };
      }
      if (this.child === undefined) {
        const before = this.text;
        const truncated = this.truncated;
        this.text = '';
        this.truncated = false;
        return { kind: 'eof', before, truncated };
      }
      const left = deadline - performance.now();
      if (left <= 0 || signal?.aborted === true) return { kind: 'timeout' };
      from = Math.max(0, this.text.length - RESCAN);
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, left);
        const onAbort = (): void => done();
        signal?.addEventListener('abort', onAbort, { once: true });
        function done(): void {
          clearTimeout(t);
          signal?.removeEventListener('abort', onAbort);
          resolve();
        }
        this.wake = done;
      });
      this.wake = undefined;
    }
  }

  private search(res: RegExp[], from: number): { index: number; m: RegExpExecArray } | undefined {
    let best: { index: number; m: RegExpExecArray } | undefined;
    for (let i = 0; i < res.length; i++) {
      const re = res[i]!;
      re.lastIndex = from;
      const m = re.exec(this.text);
      if (m !== null && (best === undefined || m.index < best.m.index)) best = { index: i, m };
    }
    return best;
  }

  /** SIGKILLs every process of the terminal but the shell (whatever it runs, stopped jobs too). */
  async killJobs(): Promise<void> {
    const init = this.initPid;
    if (init === undefined) return;
    const procs = await descendantsOf(init);
    // the first is `sh -c`, which exec'd into the shell
    for (const p of procs.slice(1)) trySignal(p, 'SIGKILL');
  }

  /** Ends the shell and all it runs; the next line typed starts a new one. */
  killShell(): void {
    const child = this.child;
    if (child === undefined) return;
    if (this.initPid !== undefined) trySignal(this.initPid, 'SIGKILL');
    try {
      child.kill('SIGKILL');
    } catch {
      // gone
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.opts.onClose?.();
    this.killShell();
    this.child = undefined;
    this.initPid = undefined;
    this.wake?.();
  }
}
