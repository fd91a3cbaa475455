/**
 * The kernel's limit on what one exec carries, checked before anything is sent to the launcher:
 * a command whose argv and environment the kernel would refuse (E2BIG) is refused here, naming
 * the field at fault, instead of failing inside the sandbox or, as it once did, in the launcher.
 *
 * The rule (fs/exec.c, bprm_stack_limits, the same since Linux 4.13): the strings of argv and envp,
 * each with its NUL, and a pointer for each (argc + envc) must fit in a quarter of the RLIMIT_STACK
 * soft limit, at most three quarters of _STK_LIM (6 MiB), at least ARG_MAX (32 pages); each
 * string, NUL included, is at most MAX_ARG_STRLEN (32 pages). Pages are taken as 4 KiB, the
 * smallest Linux has, so both are conservative on larger pages. The exec also copies the program's
 * resolved path first, and a `#!` script adds its interpreter line and its own path again: those
 * are kept free (EXEC_RESERVE), since they are not known here. The stack limit is this process's:
 * the launcher server and every command it starts inherit it (the launcher sets no stack rlimit),
 * and native/sandbox-launch-serve.c bounds its records by the same formula.
 */
import { readFileSync } from 'node:fs';
import { InvalidFieldError } from '../errors.js';

const PAGE = 4096;
/** Each string of an exec, NUL included, is at most this (the kernel's MAX_ARG_STRLEN). */
export const MAX_ARG_STRLEN = 32 * PAGE;
const ARG_MAX_FLOOR = 32 * PAGE;
const STK_LIM_SHARE = (8 << 20) * 0.75;
const POINTER = 8;
const PATH_MAX = 4096;
/** The program's resolved path, a `#!` line (BINPRM_BUF_SIZE) and the script's path, and their pointers. */
export const EXEC_RESERVE = 2 * PATH_MAX + 256 + 4 * POINTER;

/** The kernel's room for one exec's strings and their pointers, for a stack soft limit (bytes, or unlimited). */
export function execStringsLimit(stackSoft: number | 'unlimited'): number {
  const quarter = stackSoft === 'unlimited' ? Number.POSITIVE_INFINITY : Math.floor(stackSoft / 4);
  return Math.max(Math.min(STK_LIM_SHARE, quarter), ARG_MAX_FLOOR);
}

/** The RLIMIT_STACK soft limit of this process, from /proc/self/limits (node has no getrlimit). */
export function stackSoftLimit(limits = readLimits()): number | 'unlimited' | undefined {
  const m = /^Max stack size\s+(\d+|unlimited)\s/m.exec(limits);
  if (m === null) return undefined;
  return m[1] === 'unlimited' ? 'unlimited' : Number(m[1]);
}

function readLimits(): string {
  try {
    return readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return '';
  }
}

let limit: number | undefined;

/**
 * This process's limit for one exec (ARG_MAX, as sysconf(_SC_ARG_MAX) gives it). Read once: node
 * cannot change its own rlimits. Unreadable, the kernel's floor, which holds whatever the limit.
 */
export function argMax(): number {
  limit ??= execStringsLimit(stackSoftLimit() ?? ARG_MAX_FLOOR);
  return limit;
}

/** What an exec's strings take of the limit: each string and its NUL, and a pointer for each. */
export function stringsBytes(strings: Iterable<string>): number {
  let n = 0;
  for (const s of strings) n += Buffer.byteLength(s) + 1 + POINTER;
  return n;
}

/** `NAME=value`, as the environment holds a variable. */
export function envStrings(env: Record<string, string>): string[] {
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

/** How a caller names the parts of a command in its errors: `argv.3`, `command`, `env.NAME`. */
export interface ExecFieldNames {
  /** The field of argv's element i. */
  element: (i: number) => string;
  /** The field of the whole command. */
  whole: string;
}

export const ARGV_FIELDS: ExecFieldNames = { element: (i) => `argv.${i}`, whole: 'argv' };
/** A shell string, run as `/bin/sh -c COMMAND`. */
export const COMMAND_FIELDS: ExecFieldNames = { element: () => 'command', whole: 'command' };

const HINT = 'pass large data in a file (PUT /files, writeFile) or on stdin; argv and the environment go through one exec, which the kernel limits';

/**
 * argv and env could not be exec'd: the field says which part, `why` how (a NUL byte, one string
 * too long, or all of them too large together).
 */
export class ExecTooLargeError extends InvalidFieldError {
  constructor(
    field: string,
    readonly why: 'nul' | 'string' | 'total',
    message: string,
  ) {
    super(field, `${field}: ${message}`, HINT);
  }
}

function checkString(s: string, field: string): void {
  if (s.includes('\0')) throw new ExecTooLargeError(field, 'nul', 'contains a NUL byte, which no exec can carry');
  const bytes = Buffer.byteLength(s) + 1;
  if (bytes > MAX_ARG_STRLEN)
    throw new ExecTooLargeError(
      field,
      'string',
      `${bytes} bytes with its NUL, past the kernel's ${MAX_ARG_STRLEN} for one argument or variable (MAX_ARG_STRLEN)`,
    );
}

function checkVariables(env: Record<string, string>): void {
  for (const [k, v] of Object.entries(env)) checkString(`${k}=${v}`, `env.${k}`);
}

/**
 * Throws ExecTooLargeError unless the kernel can exec `argv` with exactly `env` (the variables the
 * command gets, the runtime's PATH and HOME defaults included): no NUL, no string past
 * MAX_ARG_STRLEN, all of them within ARG_MAX with EXEC_RESERVE to spare. A total past it is the
 * environment's fault where the environment alone does not fit, else the command's.
 */
export function checkExecFits(argv: string[], env: Record<string, string>, names: ExecFieldNames = ARGV_FIELDS, max = argMax()): void {
  argv.forEach((a, i) => checkString(a, names.element(i)));
  checkVariables(env);
  const argvBytes = stringsBytes(argv);
  const envBytes = stringsBytes(envStrings(env));
  const room = max - EXEC_RESERVE;
  if (argvBytes + envBytes <= room) return;
  const field = envBytes > room ? 'env' : names.whole;
  throw new ExecTooLargeError(
    field,
    'total',
    `the command (${argvBytes} bytes) and its environment (${envBytes} bytes, ${Object.keys(env).length} variables with the sandbox's own and PATH, HOME) ` +
      `take more than the kernel's limit for one exec here, ARG_MAX ${max} bytes less ${EXEC_RESERVE} for the program's path ` +
      '(each string counts with its NUL and an 8-byte pointer)',
  );
}

/** What a sandbox's own environment must leave of ARG_MAX for the commands the runtime runs in it (files, diff, sessions). */
export const COMMAND_ROOM = 16 << 10;

/** Throws ExecTooLargeError (field `env`) unless `env` leaves COMMAND_ROOM of one exec for a command. */
export function checkEnvLeavesRoom(env: Record<string, string>, max = argMax()): void {
  checkVariables(env);
  const envBytes = stringsBytes(envStrings(env));
  if (envBytes <= max - EXEC_RESERVE - COMMAND_ROOM) return;
  throw new ExecTooLargeError(
    'env',
    'total',
    `the sandbox's environment (${envBytes} bytes, ${Object.keys(env).length} variables with PATH and HOME) leaves less than ${COMMAND_ROOM} bytes ` +
      `for a command of the kernel's limit for one exec here, ARG_MAX ${max} bytes less ${EXEC_RESERVE} for the program's path`,
  );
}

/**
 * Throws ExecTooLargeError (field `blame`) unless the launcher's own command line `cmd` with its
 * environment can be exec'd: where the launcher is exec'd with the command's argv and variables
 * on its command line (a one-shot run, an interactive shell), that exec is the first to hit the
 * limit, by each variable's `--env` and the sandbox's options.
 */
export function checkLauncherFits(cmd: string[], env: Record<string, string>, blame: string, max = argMax()): void {
  const bytes = stringsBytes(cmd) + stringsBytes(envStrings(env));
  if (bytes <= max - EXEC_RESERVE) return;
  throw new ExecTooLargeError(
    blame,
    'total',
    `the launcher's command line for it (the command, each variable behind an --env, and the sandbox's options) takes ${bytes} bytes, ` +
      `more than the kernel's limit for one exec here, ARG_MAX ${max} bytes less ${EXEC_RESERVE} for the program's path`,
  );
}
