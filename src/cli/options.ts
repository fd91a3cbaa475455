/**
 * The one parser for every number, size, duration and path option of the CLI. Each helper returns
 * a commander argument parser: commander calls it while it reads the command line, so a bad value
 * stops the command before anything is opened or pulled, and main() turns the error into one line
 * naming the option (`error: option '--pids <n>' argument 'abc' is invalid. a whole number ...`)
 * and exit 2. Defaults given to commander are already parsed values (commander never parses them).
 *
 * Adding an option: `.option('--foo <n>', 'what it is', opt.int({ min: 1 }), 4)`; values that
 * are a number or a keyword: `opt.or('auto', opt.int({ min: 0 }))`; a default best shown as typed:
 * `.addOption(option('--cap <size>', 'what it is', opt.size(), { value: 2 ** 30, shown: '1g' }))`.
 *
 * Schemas are made on first use, not at load: building zod schemas is part of what made the CLI
 * slow to start, and most commands use few of these.
 */
import { InvalidArgumentError, Option } from 'commander';
import { z } from 'zod';

export type ArgParser<T> = (value: string, previous?: T) => T;

/**
 * An option whose default is a parsed value shown to people as they would type it
 * (`--disk <size>` ... `(default: 1g)`, not `1073741824`): `.addOption(option(...))`.
 */
export function option<T>(flags: string, description: string, parse: ArgParser<T>, defaultValue?: { value: T; shown: string }): Option {
  const o = new Option(flags, description).argParser(parse);
  return defaultValue === undefined ? o : o.default(defaultValue.value, defaultValue.shown);
}

/** A commander parser from a zod schema over the option's text; the first issue is the message. */
export function fromSchema<T>(make: () => z.ZodType<T, string>): ArgParser<T> {
  let schema: z.ZodType<T, string> | undefined;
  return (value: string): T => {
    schema ??= make();
    const r = schema.safeParse(value);
    if (!r.success) throw new InvalidArgumentError(r.error.issues[0]?.message ?? 'invalid value');
    return r.data;
  };
}

interface Bounds {
  min?: number;
  max?: number;
}

function bounded(n: z.ZodNumber, b: Bounds, unit: (x: number) => string): z.ZodNumber {
  let s = n;
  if (b.min !== undefined) s = s.min(b.min, `must be at least ${unit(b.min)}`);
  if (b.max !== undefined) s = s.max(b.max, `must be at most ${unit(b.max)}`);
  return s;
}

const SIZE_UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };
const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `512m`, `2g`, `1.5G`, `100k`, `4MiB`, or bytes. */
function sizeText(): z.ZodType<number, string> {
  return z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?([kmgt](i?b)?)?$/i, 'not a size: use bytes or a number with k, m, g or t (e.g. 512m, 2g)')
    .transform((s) => {
      const m = /^([\d.]+)([kmgt])?/i.exec(s)!;
      return Math.round(Number(m[1]) * (SIZE_UNITS[(m[2] ?? '').toLowerCase()] ?? 1));
    });
}

/** `30s`, `15m`, `2h`, `7d`, `250ms`, or plain seconds; in milliseconds. */
function durationText(): z.ZodType<number, string> {
  return z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?(ms|s|m|h|d)?$/, 'not a duration: use e.g. 30s, 15m, 2h, 7d (plain numbers are seconds)')
    .transform((s) => {
      const m = /^([\d.]+)(ms|s|m|h|d)?$/.exec(s)!;
      return Number(m[1]) * (DURATION_UNITS[m[2] ?? 's'] ?? 1000);
    });
}

function fmtSize(n: number): string {
  return n >= 1024 ** 2 && n % 1024 ** 2 === 0 ? `${n / 1024 ** 2}m` : `${n} bytes`;
}

export const opt = {
  /** A whole number (decimal digits only: `1e3`, `0x10`, `4.0` are refused). */
  int: (b: Bounds = {}): ArgParser<number> =>
    fromSchema(() =>
      z
        .string()
        .trim()
        .regex(/^-?\d+$/, 'not a whole number')
        .transform(Number)
        .pipe(bounded(z.number().int().max(Number.MAX_SAFE_INTEGER, 'too large'), b, String)),
    ),

  /** A decimal number; `positive` refuses 0 as well as negatives. */
  number: (b: Bounds & { positive?: boolean } = {}): ArgParser<number> =>
    fromSchema(() =>
      z
        .string()
        .trim()
        .regex(/^-?\d+(\.\d+)?$/, 'not a number')
        .transform(Number)
        .pipe(bounded(b.positive === true ? z.number().positive('must be more than 0') : z.number(), b, String)),
    ),

  /** A size in bytes (see sizeText); `min` defaults to 1: a zero limit is refused, not ignored. */
  size: (b: Bounds = {}): ArgParser<number> => fromSchema(() => sizeText().pipe(bounded(z.number(), { min: 1, ...b }, fmtSize))),

  /** A duration in milliseconds (see durationText); `min` defaults to 1 ms. */
  duration: (b: Bounds = {}): ArgParser<number> => fromSchema(() => durationText().pipe(bounded(z.number(), { min: 1, ...b }, (ms) => `${ms} ms`))),

  /** One of a fixed set of words. */
  oneOf: <const T extends string>(values: readonly T[]): ArgParser<T> =>
    fromSchema(() => z.enum(values as unknown as [T, ...T[]], { error: () => `must be one of ${values.join(', ')}` })),

  /** `keyword` itself, or what `parse` makes of the value (`--id-shift auto|N`, `--ram-upper auto|SIZE`). */
  or:
    <const K extends string, T>(keyword: K, parse: ArgParser<T>): ArgParser<K | T> =>
    (value: string) =>
      value.trim() === keyword ? keyword : parse(value),

  /**
   * An absolute path inside a sandbox, without `.` or `..` components: the sandbox would resolve
   * such a path inside its own root, but a workdir that climbs is almost always a mistake.
   */
  sandboxPath: (): ArgParser<string> =>
    fromSchema(() =>
      z
        .string()
        .startsWith('/', 'must be an absolute path inside the sandbox (e.g. /testbed)')
        .refine((p) => !p.split('/').some((c) => c === '..' || c === '.'), 'may not contain . or .. components')
        .refine((p) => !/[\0\n]/.test(p), 'may not contain NUL or newlines')
        .transform((p) => (p.length > 1 ? p.replace(/\/+$/, '').replace(/\/{2,}/g, '/') : p)),
    ),

  /** Repeatable `NAME=value` (each `-e` adds one; a later one wins): one value per flag, so it never takes the next argument. */
  envPair: (): ArgParser<Record<string, string>> => {
    return (value: string, previous?: Record<string, string>): Record<string, string> => {
      const i = value.indexOf('=');
      const name = value.slice(0, Math.max(i, 0));
      if (i <= 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
        throw new InvalidArgumentError('use NAME=value (NAME: letters, digits and _, not starting with a digit)');
      return { ...(previous ?? {}), [name]: value.slice(i + 1) };
    };
  },
};
