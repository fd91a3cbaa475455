/**
 * SWE-ReX's bash sessions (its local runtime's BashSession) over minisandbox's persistent sessions:
 * a `bash -n` syntax check before each command, the exit code captured per command, stdout and
 * stderr as one output (the order a terminal shows them) with ANSI escapes stripped, a timeout that
 * raises CommandTimeoutError while the session stays usable (the command is interrupted, the
 * shell keeps its cwd and variables), interrupt actions, and `check: raise`.
 *
 * Unlike SWE-ReX there is no prompt to match: the end of a command is the session's own sentinel,
 * so a command that prints a PS1-like string, or runs long, cannot confuse it.
 */
import { randomBytes } from 'node:crypto';
import { MinisandboxError } from '../errors.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { ansiQuote, type Session } from '../sandbox/session.js';
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
/** `timeout: null` is "no timeout": the longest a timer can wait (the sandbox's TTL ends it anyway). */
export const NO_TIMEOUT_MS = 2 ** 31 - 1;
/** Output kept per command (SWE-ReX keeps all; an agent never reads more than this). */
export const MAX_OUTPUT_BYTES = 8 << 20;
/** Sourcing startup files gets at least this long, whatever `startup_timeout` says: starting the shell is ours. */
const MIN_STARTUP_MS = 10_000;

export interface BashObservation {
  output: string;
  exit_code: number | null;
  failure_reason: string;
  expect_string: string;
  session_type: 'bash';
}

/** As SWE-ReX's `_strip_control_chars`: ANSI escape sequences out, CRLF to LF. */
export function stripControlChars(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching ESC is the point
  return s.replace(/\x1B[@-_][0-?]*[ -/]*[@-~]/g, '').replaceAll('\r\n', '\n');
}

/** The SWE-ReX sessions of each sandbox by name; they go with the sandbox object (a WeakMap keeps nothing alive). */
const sessionsBySandbox = new WeakMap<Sandbox, Map<string, Session>>();

export function swerexSessions(sb: Sandbox): Map<string, Session> {
  let m = sessionsBySandbox.get(sb);
  if (m === undefined) {
    m = new Map();
    sessionsBySandbox.set(sb, m);
  }
  return m;
}

export function sessionNamed(sb: Sandbox | undefined, name: string): Session {
  const s = sb === undefined ? undefined : sessionsBySandbox.get(sb)?.get(name);
  if (s === undefined) throw sessionDoesNotExist(`session ${pyRepr(name)} does not exist`);
  return s;
}

export async function createBashSession(sb: Sandbox, req: CreateBashSessionRequest): Promise<{ output: string; session_type: 'bash' }> {
  const sessions = swerexSessions(sb);
  if (sessions.has(req.session)) throw sessionExists(`session ${req.session} already exists`);
  const s = sb.newSession({ maxOutputBytes: MAX_OUTPUT_BYTES });
  // taken before the first await: a second create of the same name meanwhile is refused
  sessions.set(req.session, s);
  // `.` of a missing file would end a POSIX sh; say what bash would and go on, as SWE-ReX's sessions do
  const script =
    req.startup_source
      .map((p) => `if [ -r ${ansiQuote(p)} ]; then . ${ansiQuote(p)}; else echo ${ansiQuote(`bash: ${p}: No such file or directory`)} >&2; fi`)
      .join('\n') || ':';
  const o = await s.run(script, { timeoutMs: Math.max(MIN_STARTUP_MS, req.startup_timeout * 1000), mergeStderr: true });
  if (o.status !== 'ok') {
    sessions.delete(req.session);
    s.close();
    if (o.status === 'timeout')
      throw new SwerexError(
        'pexpect.exceptions.TIMEOUT',
        `Timeout exceeded: sourcing ${req.startup_source.join(', ')} took over ${pyFloat(req.startup_timeout)} s`,
      );
    throw runtimeFailure('start the session', o);
  }
  return { output: stripControlChars(o.stdout), session_type: 'bash' };
}

export function closeBashSession(sb: Sandbox | undefined, name: string): { session_type: 'bash' } {
  const s = sessionNamed(sb, name);
  s.close();
  swerexSessions(sb!).delete(name);
  return { session_type: 'bash' };
}

/** Ends every SWE-ReX session of the sandbox (the runtime's `close`). */
export function closeAllBashSessions(sb: Sandbox): void {
  const sessions = swerexSessions(sb);
  for (const s of sessions.values()) s.close();
  sessions.clear();
}

/** SWE-ReX's `_check_bash_command`: `bash -n` over the command (sh -n where the image has no bash). */
async function checkSyntax(s: Session, command: string): Promise<void> {
  // the command goes in as a quoted here-document, as SWE-ReX does: no argv size limit, no expansion
  const end = `__MSB_SYNTAX_${randomBytes(8).toString('hex')}`;
  const o = await s.run(`"$(command -v bash || echo sh)" -n <<'${end}'\n${command}\n${end}`, { timeoutMs: 60_000 });
  if (o.status !== 'ok') throw runtimeFailure('check the command syntax', o);
  if (o.exitCode === 0) return;
  const message =
    `Error (exit code ${o.exitCode}) while checking bash command \n${pyRepr(command)}\n` + `---- Stderr ----\n${o.stderr}\n---- Stdout ----\n${o.stdout}`;
  throw bashIncorrectSyntax(message, { bash_stdout: o.stdout, bash_stderr: o.stderr });
}

export async function runBashAction(s: Session, a: BashAction, signal?: AbortSignal): Promise<BashObservation & { outcome: CommandOutcome }> {
  if (a.is_interactive_command || a.is_interactive_quit)
    throw builtin(
      'NotImplementedError',
      'interactive commands (is_interactive_command, is_interactive_quit) are not supported by minisandbox sessions: run the program non-interactively',
    );
  await checkSyntax(s, a.command);
  const restartsBefore = s.restarts;
  const o = await s.run(a.command, {
    timeoutMs: a.timeout === null ? NO_TIMEOUT_MS : Math.max(1, Math.round(a.timeout * 1000)),
    mergeStderr: true,
    ...(signal === undefined ? {} : { signal }),
  });
  if (o.status === 'timeout')
    throw commandTimeout(`timeout after ${a.timeout === null ? 'None' : pyFloat(a.timeout)} seconds while running command ${pyRepr(a.command)}`);
  if (o.status === 'infra_error') throw runtimeFailure('run the command', o);
  const output = stripControlChars(o.stdout);
  let exitCode: number | null = null;
  if (a.check !== 'ignore') {
    if (s.restarts !== restartsBefore) {
      // the shell itself ended (the command ran `exit`, or it was killed): no sentinel, no exit code
      if (a.check === 'raise')
        throw noExitCode(
          `the shell ended while running ${pyRepr(a.command)}, so its exit code is unknown; the session continues in a new shell, without the old one's state`,
        );
    } else exitCode = o.exitCode;
  }
  if (a.check === 'raise' && exitCode !== 0) {
    const msg = `Command ${pyRepr(a.command)} failed with exit code ${exitCode}. Here is the output:\n${pyRepr(output)}`;
    throw nonZeroExitCode(a.error_msg === '' ? msg : `${a.error_msg}: ${msg}`);
  }
  return {
    output,
    exit_code: exitCode,
    failure_reason: o.stdoutTruncated ? `output truncated to its first ${MAX_OUTPUT_BYTES} bytes` : '',
    expect_string: PS1,
    session_type: 'bash',
    outcome: o,
  };
}

/**
 * SWE-ReX's interrupt: Ctrl-C to the running command, retried, then the command killed. The
 * running command's own request gets its output; this answers once the shell is back.
 */
export async function interruptBashSession(s: Session, a: BashInterruptAction): Promise<BashObservation> {
  // a no-op queued behind the running command: it runs when the shell is back, as SWE-ReX waits for its PS1
  const back = s.run(':', { timeoutMs: 60_000 }).then(
    () => true,
    () => true,
  );
  const done: BashObservation = { output: '', exit_code: 0, failure_reason: '', expect_string: PS1, session_type: 'bash' };
  for (let i = 0; i < a.n_retry; i++) {
    await s.interruptCurrent('SIGINT');
    if (await settlesWithin(back, Math.max(1, a.timeout * 1000))) return done;
  }
  // SWE-ReX's fallback kills the job; a killed process is gone within moments, even on a busy host
  await s.interruptCurrent('SIGKILL');
  if (await settlesWithin(back, Math.max(5000, a.timeout * 1000))) return done;
  throw new SwerexError('pexpect.exceptions.TIMEOUT', 'Failed to interrupt session');
}

async function settlesWithin(p: Promise<boolean>, ms: number): Promise<boolean> {
  let t: NodeJS.Timeout | undefined;
  const r = await Promise.race([p, new Promise<false>((resolve) => (t = setTimeout(() => resolve(false), ms)))]);
  clearTimeout(t);
  return r;
}

function runtimeFailure(what: string, o: CommandOutcome): MinisandboxError {
  return new MinisandboxError('SANDBOX_DESTROYED', `the session could not ${what}: ${o.error ?? o.status}`, {
    hint: 'the sandbox may have ended (TTL, idle timeout, close); create a new session, or a new sandbox',
  });
}
