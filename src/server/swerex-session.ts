/**
 * SWE-ReX's bash sessions (its local runtime's BashSession) over a terminal session: bash
 * interactive on a terminal with echo off, 24x80, as pexpect runs it, so `ls` prints columns,
 * `$-` has `i`, a pager waits for keys and an interactive program (a REPL, gdb) reads its input.
 * Each command is syntax-checked first (bash -n's verdict: the shell's own parse, and bash -n
 * itself for a command that fails it, see sandbox/terminal-session.ts); its output is what the
 * terminal printed up to the next prompt, decoded with backslashreplace, ANSI escapes and the CR
 * of each CRLF stripped as SWE-ReX's `_strip_control_chars` does, with `$?` from the prompt;
 * `expect` strings are matched as pexpect does; interactive commands and interrupts (Ctrl-C
 * tries, then Ctrl-Z and `kill -9 %1`) are SWE-ReX's.
 *
 * Unlike SWE-ReX the end of a command is a prompt marker of the session's own (never a string
 * the command could print by chance), and a command that times out is interrupted at once (as
 * SWE-agent does next), so that the session stays usable; its output goes to the interrupt action
 * a client sends next.
 */
import { MinisandboxError } from '../errors.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { ansiQuote } from '../sandbox/session.js';
import { NO_BASH, type ExpectOutcome, type TerminalSession } from '../sandbox/terminal-session.js';
import { backslashReplace } from '../util/py-codec.js';
import {
  SwerexError,
  bashIncorrectSyntax,
  builtin,
  commandTimeout,
  noExitCode,
  nonZeroExitCode,
  pyFloat,
  pyRepr,
  sessionDoesNotExist,
  sessionExists,
} from './swerex-exceptions.js';
import type { BashAction, BashInterruptAction, CreateBashSessionRequest } from './swerex-schemas.js';

/** The PS1 SWE-ReX's sessions set and report as `expect_string` when a command ends normally. */
export const PS1 = 'SHELLPS1PREFIX';
/** SWE-ReX's other marker, taken out of outputs as it does. */
const UNIQUE_STRING = 'UNIQUESTRING29234';
/** `timeout: null` is "no timeout": the longest a timer can wait (the sandbox's TTL ends it anyway). */
export const NO_TIMEOUT_MS = 2 ** 31 - 1;
/** Output kept per command (SWE-ReX keeps all; an agent never reads more than this). */
export const MAX_OUTPUT_BYTES = 8 << 20;
/** Sourcing startup files gets at least this long, whatever `startup_timeout` says: starting the shell is ours. */
const MIN_STARTUP_MS = 10_000;
/** SWE-ReX's interrupt defaults, used for the interrupt that follows a timeout. */
const INTERRUPT = { timeoutMs: 200, nRetry: 3 };

export interface BashObservation {
  output: string;
  exit_code: number | null;
  failure_reason: string;
  expect_string: string;
  session_type: 'bash';
}

/** One SWE-ReX session: its terminal, and what SWE-ReX would still have buffered. */
interface FaceSession {
  term: TerminalSession;
  /** bash -n itself, for a command the shell's own check refused (whose message is bash -n's). */
  bashN: (command: string) => Promise<void>;
  /** What the interrupt after a timeout read: the answer to the client's own interrupt action. */
  interrupted: string | undefined;
  /** An interactive command left a program reading the terminal: a command goes to it as typed. */
  inProgram: boolean;
}

/** As SWE-ReX's `_strip_control_chars`: ANSI escape sequences out, CRLF to LF. */
export function stripControlChars(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching ESC is the point
  return s.replace(/\x1B[@-_][0-?]*[ -/]*[@-~]/g, '').replaceAll('\r\n', '\n');
}

/** What Python's str.strip() takes off (its whitespace, which differs from JavaScript's). */
const PY_SPACE = '\\t\\n\\x0b\\x0c\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const PY_LSTRIP = new RegExp(`^[${PY_SPACE}]+`);
const PY_RSTRIP = new RegExp(`[${PY_SPACE}]+$`);
export const pyStrip = (s: string): string => s.replace(PY_LSTRIP, '').replace(PY_RSTRIP, '');

/**
 * An `expect` string: pexpect compiles it as a Python regular expression. The spellings that
 * differ in JavaScript are translated; the rest is the same language.
 */
export function pyRegex(pattern: string): RegExp {
  let flags = '';
  const src = pattern
    .replace(/^\(\?([aiLmsux]+)\)/, (_m, f: string) => {
      flags = [...new Set(f.replace(/[aLux]/g, ''))].join('');
      return '';
    })
    .replace(/\(\?P</g, '(?<')
    .replace(/\(\?P=(\w+)\)/g, '\\k<$1>')
    .replace(/\\A/g, '^')
    .replace(/\\Z/g, '$(?![\\s\\S])');
  try {
    return new RegExp(src, flags);
  } catch (e) {
    throw new SwerexError('re.error', `${(e as Error).message} (expect pattern ${pyRepr(pattern)})`);
  }
}

/** The SWE-ReX sessions of each sandbox by name; they go with the sandbox object (a WeakMap keeps nothing alive). */
const sessionsBySandbox = new WeakMap<Sandbox, Map<string, FaceSession>>();

function swerexSessions(sb: Sandbox): Map<string, FaceSession> {
  let m = sessionsBySandbox.get(sb);
  if (m === undefined) {
    m = new Map();
    sessionsBySandbox.set(sb, m);
  }
  return m;
}

export function sessionNamed(sb: Sandbox | undefined, name: string): FaceSession {
  const s = sb === undefined ? undefined : sessionsBySandbox.get(sb)?.get(name);
  if (s === undefined) throw sessionDoesNotExist(`session ${pyRepr(name)} does not exist`);
  return s;
}

/**
 * SWE-ReX's `_check_bash_command`: `bash -n` over the command and a newline on its stdin (its
 * heredoc), in the sandbox; BashIncorrectSyntaxError with what it said if it fails.
 */
function bashNOf(sb: Sandbox): (command: string) => Promise<void> {
  return async (command) => {
    const r = await sb.execBytes(['/bin/sh', '-c', 'exec bash -n'], { stdin: `${command}\n`, timeoutMs: 60_000 });
    if (r.outcome.status !== 'ok' || r.outcome.exitCode === null) throw runtimeFailure('check the command syntax', r.outcome.error ?? r.outcome.status);
    if (r.outcome.exitCode === 0) return;
    const stdout = backslashReplace(r.stdout());
    const stderr = backslashReplace(r.stderr());
    const message =
      `Error (exit code ${r.outcome.exitCode}) while checking bash command \n${pyRepr(command)}\n` + `---- Stderr ----\n${stderr}\n---- Stdout ----\n${stdout}`;
    throw bashIncorrectSyntax(message, { bash_stdout: stdout, bash_stderr: stderr });
  };
}

export async function createBashSession(sb: Sandbox, req: CreateBashSessionRequest): Promise<{ output: string; session_type: 'bash' }> {
  const sessions = swerexSessions(sb);
  if (sessions.has(req.session)) throw sessionExists(`session ${req.session} already exists`);
  // SWE-ReX's shell environment: the server's, with its prompt variables
  const term = sb.newTerminalSession({ env: { PS1, PS2: '', PS0: '' }, maxOutputChars: MAX_OUTPUT_BYTES });
  const fs: FaceSession = { term, bashN: bashNOf(sb), interrupted: undefined, inProgram: false };
  // taken before the first await: a second create of the same name meanwhile is refused
  sessions.set(req.session, fs);
  const setup = req.startup_source.map((p) => `source ${ansiQuote(p, '!')}`).join(' ; ');
  const fail = (e: Error): never => {
    sessions.delete(req.session);
    term.close();
    throw e;
  };
  let o: ExpectOutcome;
  try {
    o = await term.exclusive(() => term.start(setup, Math.max(MIN_STARTUP_MS, req.startup_timeout * 1000)));
  } catch (e) {
    return fail(e as Error);
  }
  if (o.kind === 'timeout')
    return fail(
      new SwerexError('pexpect.exceptions.TIMEOUT', `Timeout exceeded: sourcing ${req.startup_source.join(', ')} took over ${pyFloat(req.startup_timeout)} s`),
    );
  if (o.kind === 'eof') {
    if (o.before.includes(NO_BASH)) return fail(new SwerexError('pexpect.exceptions.EOF', 'the environment has no bash: SWE-ReX sessions run bash'));
    return fail(runtimeFailure('start the session', `the shell ended: ${pyRepr(stripControlChars(o.before).slice(-500))}`));
  }
  // SWE-ReX's answer is what came before the first prompt of its own (rc files may set another first)
  return { output: stripControlChars(o.before.split(PS1)[0]!), session_type: 'bash' };
}

function closeFaceSession(s: FaceSession): void {
  s.term.close();
}

export function closeBashSession(sb: Sandbox | undefined, name: string): { session_type: 'bash' } {
  const s = sessionNamed(sb, name);
  closeFaceSession(s);
  swerexSessions(sb!).delete(name);
  return { session_type: 'bash' };
}

/** Ends every SWE-ReX session of the sandbox (the runtime's `close`). */
export function closeAllBashSessions(sb: Sandbox): void {
  const sessions = swerexSessions(sb);
  for (const s of sessions.values()) closeFaceSession(s);
  sessions.clear();
}

const timeoutMsOf = (t: number | null): number => (t === null ? NO_TIMEOUT_MS : Math.max(1, Math.round(t * 1000)));

function observation(output: string, exitCode: number | null, expectString: string, truncated: boolean): BashObservation {
  return {
    output,
    exit_code: exitCode,
    failure_reason: truncated ? `output truncated to its first ${MAX_OUTPUT_BYTES} characters` : '',
    expect_string: expectString,
    session_type: 'bash',
  };
}

/** The shell, started again (with the session's startup files) if a command ended it. */
async function shellOf(s: FaceSession): Promise<TerminalSession> {
  const restarts = s.term.restarts;
  if (!(await s.term.ensureShell(MIN_STARTUP_MS))) throw runtimeFailure('start the shell again', 'no prompt');
  if (s.term.restarts !== restarts) s.inProgram = false;
  return s.term;
}

export async function runBashAction(s: FaceSession, a: BashAction, signal?: AbortSignal): Promise<BashObservation> {
  if (a.is_interactive_command || a.is_interactive_quit) return runInteractive(s, a);
  // SWE-ReX hands the command to subprocess.run for its check, which refuses a NUL in it
  if (a.command.includes('\0')) throw builtin('ValueError', 'embedded null byte');
  const patterns = a.expect.map(pyRegex);
  return s.term.exclusive(async () => {
    s.interrupted = undefined;
    const term = await shellOf(s);
    const timeoutMs = timeoutMsOf(a.timeout);
    let o: ExpectOutcome;
    if (s.inProgram) {
      // a program reads the terminal, not the shell: bash -n checks, then the command goes in as typed (as SWE-ReX does)
      await s.bashN(a.command);
      term.sendLine(a.command);
      o = await term.expect(patterns, timeoutMs, signal);
    } else {
      // the shell checks and runs it; what its check refuses, bash -n itself judges (a cut-off here-document passes there)
      term.sendCommand(a.command, { checked: true });
      o = await term.expect(patterns, timeoutMs, signal);
      if (o.kind === 'match' && o.syntaxError) {
        await s.bashN(a.command);
        term.sendCommand(a.command);
        o = await term.expect(patterns, timeoutMs, signal);
      }
    }
    if (o.kind === 'timeout') {
      s.interrupted = await interruptAfterTimeout(s);
      throw commandTimeout(`timeout after ${a.timeout === null ? 'None' : pyFloat(a.timeout)} seconds while running command ${pyRepr(a.command)}`);
    }
    if (o.kind === 'eof') {
      // the shell itself ended (the command ran `exit`, or it was killed): no prompt, no exit code
      if (a.check === 'raise')
        throw noExitCode(
          `the shell ended while running ${pyRepr(a.command)}, so its exit code is unknown; the session continues in a new shell, without the old one's state`,
        );
      return observation(stripControlChars(o.before), null, '', o.truncated);
    }
    const matched = o.index === -1 ? PS1 : a.expect[o.index]!;
    s.inProgram = o.index !== -1;
    let output = stripControlChars(o.before);
    if (a.check === 'ignore') return observation(output, null, matched, o.truncated);
    let exitCode = o.exitCode;
    if (o.index !== -1) {
      // SWE-ReX asks the shell for `$?` next and gives it a second: the command must end by then
      const back = await term.expect([], 1000);
      if (back.kind !== 'match') {
        if (a.check === 'raise') throw noExitCode('timeout while getting exit code');
        return observation(output, null, matched, o.truncated);
      }
      s.inProgram = false;
      output += stripControlChars(back.before);
      exitCode = back.exitCode;
    }
    output = output.replaceAll(UNIQUE_STRING, '').replaceAll(PS1, '');
    if (a.check === 'raise' && exitCode !== 0) {
      const msg = `Command ${pyRepr(a.command)} failed with exit code ${exitCode}. Here is the output:\n${pyRepr(output)}`;
      throw nonZeroExitCode(a.error_msg === '' ? msg : `${a.error_msg}: ${msg}`);
    }
    return observation(output, exitCode, matched, o.truncated);
  });
}

/**
 * SWE-ReX's `_run_interactive`: the command typed as it is (input for the program reading the
 * terminal, or a line for the shell), up to an `expect` string or the prompt; no exit code. A
 * timeout leaves the program running, as there: it holds state the client built.
 */
function runInteractive(s: FaceSession, a: BashAction): Promise<BashObservation> {
  const patterns = a.expect.map(pyRegex);
  return s.term.exclusive(async () => {
    s.interrupted = undefined;
    const term = await shellOf(s);
    term.sendLine(a.command);
    const o = await term.expect(patterns, timeoutMsOf(a.timeout));
    if (o.kind === 'timeout') {
      s.inProgram = true;
      throw commandTimeout(`timeout after ${a.timeout === null ? 'None' : pyFloat(a.timeout)} seconds while running command ${pyRepr(a.command)}`);
    }
    if (o.kind === 'eof')
      throw noExitCode(`the shell ended while running ${pyRepr(a.command)}; the session continues in a new shell, without the old one's state`);
    s.inProgram = o.index !== -1;
    const matched = o.index === -1 ? PS1 : a.expect[o.index]!;
    let output = stripControlChars(o.before);
    if (a.is_interactive_quit) {
      // SWE-ReX turns echo off again once the program is gone (some leave it on)
      if (!s.inProgram) {
        term.sendCommand('stty -echo');
        await term.expect([], 1000);
      }
    } else {
      const trimmed = output.replace(PY_LSTRIP, '');
      output = pyStrip(trimmed.startsWith(a.command) ? trimmed.slice(a.command.length) : trimmed);
    }
    return observation(output, 0, matched, o.truncated);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * SWE-ReX's interrupt on the terminal: Ctrl-C, up to `nRetry` times, each given `timeoutMs` for
 * the prompt (or an `expect` string); then Ctrl-Z and `kill -9 %1`. Its output, or undefined if
 * the shell never came back.
 */
async function interruptSequence(
  s: FaceSession,
  patterns: RegExp[],
  expect: string[],
  timeoutMs: number,
  nRetry: number,
): Promise<{ output: string; matched: string } | undefined> {
  const term = s.term;
  const matchedOf = (o: ExpectOutcome & { kind: 'match' }): string => (o.index === -1 ? PS1 : expect[o.index]!);
  for (let i = 0; i < nRetry; i++) {
    term.sendControl('c');
    const o = await term.expect(patterns, timeoutMs);
    if (o.kind === 'match') {
      if (o.index === -1) s.inProgram = false;
      return { output: pyStrip(stripControlChars(o.before)), matched: matchedOf(o) };
    }
    if (o.kind === 'eof') return undefined;
    await sleep(200);
  }
  // what these print SWE-ReX keeps as it came (its fallback does not strip control characters)
  term.sendControl('z');
  const stopped = await term.expect(patterns, timeoutMs);
  if (stopped.kind !== 'match') return undefined;
  term.sendLine('kill -9 %1');
  const killed = await term.expect(patterns, timeoutMs);
  if (killed.kind !== 'match') return undefined;
  if (killed.index === -1) s.inProgram = false;
  return { output: pyStrip(stopped.before + killed.before), matched: matchedOf(killed) };
}

/** After a command timed out: SWE-ReX's interrupt, then, if that fails, its processes killed. */
async function interruptAfterTimeout(s: FaceSession): Promise<string> {
  const r = await interruptSequence(s, [], [], INTERRUPT.timeoutMs, INTERRUPT.nRetry);
  if (r !== undefined) return r.output;
  await s.term.killJobs();
  const back = await s.term.expect([], 5000);
  if (back.kind === 'match') {
    s.inProgram = false;
    return pyStrip(stripControlChars(back.before));
  }
  // not even the shell answers: a new one takes the next command
  s.term.killShell();
  return '';
}

/**
 * SWE-ReX's interrupt action. While a command runs (another request's), its keys go to that
 * command, whose own request gets the output; this answers once the shell is back.
 */
export async function interruptBashSession(s: FaceSession, a: BashInterruptAction): Promise<BashObservation> {
  const patterns = a.expect.map(pyRegex);
  const timeoutMs = Math.max(1, a.timeout * 1000);
  if (s.term.busy) {
    for (let i = 0; i < a.n_retry; i++) {
      s.term.sendControl('c');
      if (await settlesWithin(s.term.idle(), timeoutMs)) return observation('', 0, PS1, false);
    }
    s.term.sendControl('z');
    if (await settlesWithin(s.term.idle(), Math.max(5000, timeoutMs)))
      return s.term.exclusive(async () => {
        s.term.sendLine('kill -9 %1');
        const o = await s.term.expect([], 5000);
        return observation(o.kind === 'match' ? pyStrip(o.before) : '', 0, PS1, false);
      });
    await s.term.killJobs();
    if (await settlesWithin(s.term.idle(), 5000)) return observation('', 0, PS1, false);
    throw new SwerexError('pexpect.exceptions.TIMEOUT', 'Failed to interrupt session');
  }
  return s.term.exclusive(async () => {
    const after = s.interrupted;
    s.interrupted = undefined;
    // the interrupt that followed a timeout already ran: SWE-ReX's would have returned this
    if (after !== undefined) return observation(after, 0, PS1, false);
    await shellOf(s);
    const r = await interruptSequence(s, patterns, a.expect, timeoutMs, a.n_retry);
    if (r !== undefined) return observation(r.output, 0, r.matched, false);
    await s.term.killJobs();
    const back = await s.term.expect([], 5000);
    if (back.kind !== 'match') throw new SwerexError('pexpect.exceptions.TIMEOUT', 'Failed to interrupt session');
    s.inProgram = false;
    return observation(pyStrip(stripControlChars(back.before)), 0, PS1, false);
  });
}

async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let t: NodeJS.Timeout | undefined;
  const r = await Promise.race([p.then(() => true), new Promise<false>((resolve) => (t = setTimeout(() => resolve(false), ms)))]);
  clearTimeout(t);
  return r;
}

function runtimeFailure(what: string, why: string): MinisandboxError {
  return new MinisandboxError('SANDBOX_DESTROYED', `the session could not ${what}: ${why}`, {
    hint: 'the sandbox may have ended (TTL, idle timeout, close); create a new session, or a new sandbox',
  });
}
