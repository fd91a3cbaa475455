/**
 * How commands talk to people and scripts: progress on stderr as one rewritten line (`plain`, the
 * default on a terminal), as JSON lines (`json`, the default elsewhere) or not at all (`none`);
 * results as text, or as one JSON document on stdout with --json. Exit codes mean something (see EXIT).
 */
import { type ErrorCode, MinisandboxError, errorMessage } from '../errors.js';

export const EXIT = {
  ok: 0,
  /** The operation ran and found problems (verify), or failed. */
  failed: 1,
  /** Bad input: usage, invalid recipe/manifest/ref. */
  invalid: 2,
  notFound: 3,
  /** The host lacks something (user namespaces, uidmap, ...). */
  host: 4,
} as const;

/** `--progress`: `auto` is `plain` on a terminal, else `json` (or `none` where a command says so). */
export const PROGRESS_MODES = ['auto', 'plain', 'json', 'none'] as const;
export type ProgressMode = (typeof PROGRESS_MODES)[number];

/** A stream reached when first written to: process.stderr/stdout are built on first read (~5 ms on a pipe, which loads net). */
export type LazyStream = () => NodeJS.WriteStream;

export class Output {
  private lastLen = 0;
  private lastAt = 0;
  private mode: Exclude<ProgressMode, 'auto'> | undefined;
  private readonly getStderr: LazyStream;
  private readonly getStdout: LazyStream;
  /**
   * `whenNotTty`: what `auto` means when stderr is not a terminal - `json` for most commands,
   * `none` for `run`, whose stderr is the sandboxed command's own.
   */
  constructor(
    readonly json: boolean,
    private readonly progressOption: ProgressMode = 'auto',
    stderr: LazyStream = () => process.stderr,
    stdout: LazyStream = () => process.stdout,
    private readonly whenNotTty: 'json' | 'none' = 'json',
  ) {
    this.getStderr = stderr;
    this.getStdout = stdout;
  }

  private get stderr(): NodeJS.WriteStream {
    return this.getStderr();
  }

  private get stdout(): NodeJS.WriteStream {
    return this.getStdout();
  }

  /** What `--progress` resolved to for this command. */
  get progressMode(): Exclude<ProgressMode, 'auto'> {
    this.mode ??= this.progressOption !== 'auto' ? this.progressOption : this.tty ? 'plain' : this.whenNotTty;
    return this.mode;
  }

  get tty(): boolean {
    return this.stderr.isTTY === true;
  }

  /** A progress event: a throttled rewritten line (`plain`), a JSON line (`json`), or nothing. */
  progress(event: Record<string, unknown> & { message: string }): void {
    if (this.progressMode === 'none') return;
    if (this.progressMode === 'json') {
      this.event(event);
      return;
    }
    const now = Date.now();
    if (now - this.lastAt < 80) return;
    this.lastAt = now;
    // plain progress into a file or pipe: one line per event, nothing to rewrite
    if (!this.tty) this.line(event.message);
    else this.redraw(event.message);
  }

  /** Terminal width, for a progress line that must fit on one row. */
  get columns(): number {
    return this.stderr.columns ?? 100;
  }

  /** Rewrites the progress line of a terminal (cut to its width). */
  redraw(text: string): void {
    const cols = this.columns;
    const line = text.length > cols - 1 ? `${text.slice(0, cols - 2)}…` : text;
    this.stderr.write(`\r${line.padEnd(this.lastLen)}`);
    this.lastLen = line.length;
  }

  /** One line of plain progress (into a file or pipe). */
  line(text: string): void {
    this.stderr.write(`${text}\n`);
  }

  /** One JSON line of progress: `{type: "progress", time, ...event}`. */
  event(event: Record<string, unknown>): void {
    this.stderr.write(`${JSON.stringify({ type: 'progress', time: new Date().toISOString(), ...event })}\n`);
  }

  /** Ends a progress line so the next output starts clean. */
  done(): void {
    if (this.lastLen > 0 && this.tty) this.stderr.write(`\r${' '.repeat(this.lastLen)}\r`);
    this.lastLen = 0;
  }

  /** The command's result: `human` for people, `value` for --json. */
  result(value: unknown, human: () => string): void {
    this.done();
    if (this.json) this.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
    else {
      const text = human();
      if (text.length > 0) this.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
    }
  }

  warn(message: string): void {
    this.done();
    if (this.tty || !this.json) this.stderr.write(`warning: ${message}\n`);
    else this.stderr.write(`${JSON.stringify({ type: 'warning', message })}\n`);
  }

  /** Reports an error and returns the exit code it maps to. */
  error(e: unknown): number {
    this.done();
    const code: ErrorCode | 'ERROR' = e instanceof MinisandboxError ? e.code : 'ERROR';
    const hint = e instanceof MinisandboxError ? e.hint : undefined;
    if (this.json) this.stdout.write(`${JSON.stringify({ error: { code, message: errorMessage(e), hint } })}\n`);
    this.stderr.write(`error: ${errorMessage(e)}\n${hint !== undefined ? `hint: ${hint}\n` : ''}`);
    if (!(e instanceof MinisandboxError) && process.env.MINISANDBOX_DEBUG && e instanceof Error) this.stderr.write(`${e.stack ?? ''}\n`);
    switch (code) {
      case 'INVALID_INPUT':
      case 'UNSAFE_PATH':
      case 'USAGE':
        return EXIT.invalid;
      case 'NOT_FOUND':
        return EXIT.notFound;
      case 'HOST_CAPABILITY':
        return EXIT.host;
      default:
        return EXIT.failed;
    }
  }
}

/** A duration as people write it: `1h`, `90m`, `45s`, `250ms` (the largest unit that divides it). */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const)
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return ms === 0 ? '0s' : `${ms}ms`;
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

/** Plain left-aligned table for terminal output. */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')).join('\n');
}
