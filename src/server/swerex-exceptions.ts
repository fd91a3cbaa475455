/**
 * SWE-ReX's exceptions as the SWE-ReX face raises them: each carries the Python class path its
 * client re-raises (`swerex.exceptions.CommandTimeoutError`, `builtins.FileNotFoundError`) and the
 * `extra_info` dict some of them have; the face answers them as HTTP 511 `{"swerexception": ...}`.
 * Messages follow SWE-ReX's own wording, Python reprs included, since agents show them to models.
 */
import { MinisandboxError } from '../errors.js';

export class SwerexError extends MinisandboxError {
  constructor(
    /** Module and class name, as Python's `type(exc).__module__ + "." + type(exc).__name__`. */
    readonly classPath: string,
    message: string,
    readonly extraInfo: Record<string, unknown> = {},
  ) {
    super('SWEREX_EXCEPTION', message, { hint: `the SWE-ReX client raises it as ${classPath}` });
  }
}

const swerex = (name: string) => (message: string, extra?: Record<string, unknown>) => new SwerexError(`swerex.exceptions.${name}`, message, extra);

export const bashIncorrectSyntax = swerex('BashIncorrectSyntaxError');
export const commandTimeout = swerex('CommandTimeoutError');
export const nonZeroExitCode = swerex('NonZeroExitCodeError');
export const noExitCode = swerex('NoExitCodeError');
export const sessionExists = swerex('SessionExistsError');
export const sessionDoesNotExist = swerex('SessionDoesNotExistError');

/** A Python builtin exception (`builtins.FileNotFoundError`, ...). */
export function builtin(name: string, message: string): SwerexError {
  return new SwerexError(`builtins.${name}`, message);
}

/** Python's repr() of a str, as SWE-ReX's messages show commands and output (`'ls -l'`). */
export function pyRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === quote || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return out + quote;
}

/** A float as Python prints it: `2.0`, not `2`. */
export function pyFloat(n: number): string {
  return Number.isInteger(n) ? `${n}.0` : String(n);
}
