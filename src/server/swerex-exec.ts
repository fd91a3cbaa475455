/**
 * SWE-ReX's `execute`, `read_file` and `write_file` (its local runtime's subprocess.run and
 * Path.read_text/write_text) inside a sandbox, with the exceptions Python would raise there.
 */
import { constants } from 'node:os';
import { MinisandboxError } from '../errors.js';
import { ExecTooLargeError } from '../sandbox/arg-max.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { RawOutcome } from '../sandbox/runner.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { backslashReplace, decodeAscii, decodeUtf8, PyCodecError } from '../util/py-codec.js';
import type { BudgetAccount, ByteBudget, ByteGrant } from '../util/byte-budget.js';
import { readFileStream, tooLargeToRead } from './file-transfer.js';
import { collectWithin, MemoryBudgetError, REQUEST_FLOOR_BYTES } from './request-memory.js';
import { builtin, commandTimeout, nonZeroExitCode, pyFloat, pyRepr, type SwerexError } from './swerex-exceptions.js';
import type { Command } from './swerex-schemas.js';
import { MAX_OUTPUT_BYTES, NO_TIMEOUT_MS } from './swerex-session.js';

export interface CommandResponse {
  stdout: string;
  stderr: string;
  exit_code: number | null;
}

/** The argv subprocess.run would run: `shell` runs a string (or a list's first item) with /bin/sh -c. */
export function commandArgv(c: Command): string[] {
  let argv: string[];
  if (c.shell) argv = ['/bin/sh', '-c', ...(typeof c.command === 'string' ? [c.command] : c.command)];
  else argv = typeof c.command === 'string' ? [c.command] : c.command;
  return c.merge_output_streams ? ['/bin/sh', '-c', 'exec "$@" 2>&1', 'sh', ...argv] : argv;
}

function reprCommand(cmd: string | string[]): string {
  return typeof cmd === 'string' ? pyRepr(cmd) : `[${cmd.map(pyRepr).join(', ')}]`;
}

export async function executeCommand(
  sb: Sandbox,
  c: Command,
  signal: AbortSignal | undefined,
  outputBudget: ByteGrant,
): Promise<{ response: CommandResponse; outcome: CommandOutcome }> {
  const argv = commandArgv(c);
  // os.execve's own check, before any of the command's strings
  if (c.env !== null && Object.keys(c.env).some((k) => k === '' || k.includes('='))) throw builtin('ValueError', 'illegal environment variable name');
  let raw: RawOutcome;
  try {
    raw = await sb.execBytes(argv, {
      timeoutMs: c.timeout === null ? NO_TIMEOUT_MS : Math.max(1, Math.round(c.timeout * 1000)),
      maxOutputBytes: MAX_OUTPUT_BYTES,
      outputBudget,
      // its bytes are decoded here: no text copy of them
      rawStdout: true,
      // subprocess.run(env=...): that environment and nothing else
      ...(c.env === null ? {} : { env: c.env, exactEnv: true }),
      ...(c.cwd === null ? {} : { workdir: c.cwd }),
      ...(signal === undefined ? {} : { signal }),
    });
  } catch (e) {
    throw e instanceof ExecTooLargeError ? execFailure(argv[0] ?? '', e) : e;
  }
  const { outcome: o, stdout, stderr } = raw;
  if (o.status === 'timeout') throw commandTimeout(`Timeout (${c.timeout === null ? 'None' : pyFloat(c.timeout)}s) exceeded while running command`);
  if (o.status === 'infra_error') throw startFailure(argv[0]!, c.cwd, o);
  // Python reports death by signal N as returncode -N
  const signum = o.status === 'killed' && o.signal !== null ? constants.signals[o.signal as NodeJS.Signals] : undefined;
  // SWE-ReX decodes with errors="backslashreplace"
  const response: CommandResponse = {
    stdout: backslashReplace(stdout()),
    stderr: backslashReplace(stderr()),
    exit_code: signum === undefined ? o.exitCode : -signum,
  };
  if (c.check && response.exit_code !== 0) {
    const msg =
      `Command ${reprCommand(c.command)} failed with exit code ${response.exit_code}. ` +
      `Stdout:\n${pyRepr(response.stdout)}\nStderr:\n${pyRepr(response.stderr)}`;
    throw nonZeroExitCode(c.error_msg === '' ? msg : `${c.error_msg}: ${msg}`);
  }
  return { response, outcome: o };
}

/** What subprocess.run raises for strings no exec can carry: Python refuses a NUL itself, the kernel the rest (E2BIG). */
function execFailure(program: string, e: ExecTooLargeError): SwerexError {
  if (e.why === 'nul') return builtin('ValueError', 'embedded null byte');
  return builtin('OSError', `[Errno 7] Argument list too long: ${pyRepr(program)}`);
}

/** What subprocess.run raises for a program that cannot start, or a cwd that is not there. */
function startFailure(program: string, cwd: string | null, o: CommandOutcome): SwerexError | MinisandboxError {
  if (o.exitCode === 127) return builtin('FileNotFoundError', `[Errno 2] No such file or directory: ${pyRepr(program)}`);
  if (o.exitCode === 126) return builtin('PermissionError', `[Errno 13] Permission denied: ${pyRepr(program)}`);
  if (cwd !== null && o.exitCode === 125) return builtin('FileNotFoundError', `[Errno 2] No such file or directory: ${pyRepr(cwd)}`);
  return new MinisandboxError('SANDBOX_DESTROYED', `the command could not run in the sandbox: ${o.error ?? o.status}`, {
    hint: 'the sandbox may have ended (TTL, idle timeout, close)',
  });
}

/** Where read_text's bytes and text are held: the server's memory budget, through the request's account. */
export interface ReadBudget {
  limit: number;
  account: BudgetAccount;
  budget: ByteBudget;
  signal?: AbortSignal;
}

/**
 * Path.read_text(encoding, errors) of a file in the sandbox. Its bytes, joined, and its text are
 * held from the memory budget (refused, 429, past it), each counted as much as the bytes read.
 */
export async function readText(sb: Sandbox, path: string, encoding: string | null, errors: string | null, mem: ReadBudget): Promise<string> {
  let chunks: Buffer[];
  try {
    const read = await readFileStream(sb, path, { limit: mem.limit, ...(mem.signal === undefined ? {} : { signal: mem.signal }) });
    chunks = await collectWithin(read.body, {
      limit: mem.limit,
      account: mem.account,
      budget: mem.budget,
      what: `the content of ${path}`,
      tooLarge: () => tooLargeToRead(path, mem.limit),
    });
  } catch (e) {
    if (e instanceof MinisandboxError && e.code === 'SANDBOX_FILE') throw await whyUnreadable(sb, path, e);
    throw e;
  }
  const size = chunks.reduce((n, c) => n + c.length, 0);
  // the bytes made one, then their text: each as much again as what was read
  if (size > REQUEST_FLOOR_BYTES && !mem.account.take(2 * size)) throw new MemoryBudgetError(`the text of ${path}`, mem.budget);
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  chunks.length = 0;
  // text mode: universal newlines, as Python reads
  const text = decode(bytes, encoding, errors).replace(/\r\n?/g, '\n');
  refuseSurrogates(text);
  return text;
}

/**
 * SWE-ReX answers `{"content": ...}` as JSON encoded to UTF-8, which fails for a lone surrogate
 * (what `surrogateescape` and `surrogatepass` decode to): its client gets the UnicodeEncodeError,
 * at the surrogates' position in that JSON text (`json.dumps(ensure_ascii=False)`, compact).
 */
function refuseSurrogates(text: string): void {
  const first = text.search(/\p{Cs}/u);
  if (first < 0) return;
  let pos = '{"content":"'.length;
  for (const ch of text.slice(0, first)) {
    if ('"\\\n\r\t\b\f'.includes(ch)) pos += 2;
    else if (ch.charCodeAt(0) < 0x20) pos += 6;
    else pos += 1; // a code point, as Python counts (an astral one is one)
  }
  const run = /^\p{Cs}+/u.exec(text.slice(first))![0];
  const n = [...run].length;
  const what =
    n === 1 ? `character '\\u${run.charCodeAt(0).toString(16).padStart(4, '0')}' in position ${pos}` : `characters in position ${pos}-${pos + n - 1}`;
  throw builtin('UnicodeEncodeError', `'utf-8' codec can't encode ${what}: surrogates not allowed`);
}

/** Path.write_text(content) after mkdir of its parents, as SWE-ReX's write_file. */
export async function writeText(sb: Sandbox, path: string, content: string | Buffer): Promise<void> {
  try {
    await sb.writeFile(path, content);
  } catch (e) {
    throw writeError(e, path);
  }
}

/** The Python exception a failed write of `path` is (the error itself where it is not the file's). */
export function writeError(e: unknown, path: string): unknown {
  if (!(e instanceof MinisandboxError && e.code === 'SANDBOX_FILE')) return e;
  if (e.message.includes('Is a directory')) return builtin('IsADirectoryError', `[Errno 21] Is a directory: ${pyRepr(path)}`);
  if (e.message.includes('Permission denied')) return builtin('PermissionError', `[Errno 13] Permission denied: ${pyRepr(path)}`);
  return builtin('OSError', e.message);
}

/** The Python exception a failed read of `path` is: asked of the sandbox, as the read was. */
async function whyUnreadable(sb: Sandbox, path: string, e: MinisandboxError): Promise<SwerexError> {
  const o = await sb.exec(['/bin/sh', '-c', '[ -e "$1" ] || exit 10; [ -d "$1" ] && exit 11; exit 12', 'msb-why', path], { timeoutMs: 30_000 });
  if (o.exitCode === 10) return builtin('FileNotFoundError', `[Errno 2] No such file or directory: ${pyRepr(path)}`);
  if (o.exitCode === 11) return builtin('IsADirectoryError', `[Errno 21] Is a directory: ${pyRepr(path)}`);
  if (e.message.includes('Permission denied')) return builtin('PermissionError', `[Errno 13] Permission denied: ${pyRepr(path)}`);
  return builtin('OSError', e.message);
}

/** Python's bytes.decode(encoding, errors) for the encodings agents use, with its exceptions. */
function decode(bytes: Buffer, encoding: string | null, errors: string | null): string {
  const enc = (encoding ?? 'utf-8').toLowerCase().replace(/[-_ ]/g, '');
  const err = errors ?? 'strict';
  try {
    if (['utf8', 'u8', 'utf', 'cp65001'].includes(enc)) return decodeUtf8(bytes, err).text;
    if (['latin1', 'latin', 'l1', 'iso88591', '8859', 'cp819'].includes(enc)) return bytes.toString('latin1');
    if (['ascii', 'usascii', '646'].includes(enc)) return decodeAscii(bytes, err);
  } catch (e) {
    if (e instanceof PyCodecError) throw builtin(e.pyClass, e.message);
    throw e;
  }
  if (['utf16', 'utf16le', 'utf16be'].includes(enc)) {
    try {
      return new TextDecoder(enc === 'utf16be' ? 'utf-16be' : 'utf-16le', { fatal: err === 'strict' }).decode(bytes);
    } catch {
      throw builtin('UnicodeDecodeError', `'${enc === 'utf16be' ? 'utf-16-be' : 'utf-16-le'}' codec can't decode the bytes: invalid data`);
    }
  }
  throw builtin('LookupError', `unknown encoding: ${encoding}`);
}
