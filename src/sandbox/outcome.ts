/**
 * The typed result of every command run in a sandbox, and the capped output collector behind it.
 */
import { z } from 'zod';
import type { ByteGrant } from '../util/byte-budget.js';

export const CommandStatusSchema = z.enum(['ok', 'timeout', 'oom', 'killed', 'infra_error']);
export type CommandStatus = z.infer<typeof CommandStatusSchema>;

export const CommandOutcomeSchema = z.strictObject({
  /** ok: ran to completion (any exit code); killed: ended by a signal we did not send for a timeout. */
  status: CommandStatusSchema,
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  durationMs: z.number().min(0),
  stdout: z.string(),
  stderr: z.string(),
  stdoutTruncated: z.boolean(),
  stderrTruncated: z.boolean(),
  /** What went wrong in the runtime itself, for infra_error. */
  error: z.string().optional(),
  /** Output was cut short of maxOutputBytes because the memory budget it captured from was spent. */
  budgetCut: z.boolean().optional(),
});
export type CommandOutcome = z.infer<typeof CommandOutcomeSchema>;

export const DEFAULT_MAX_OUTPUT_BYTES = 1 << 20;

/** The outcome of a command the runtime could not run (no output, no exit status), since `started`. */
export function infraErrorOutcome(started: number, error: string): CommandOutcome {
  return {
    status: 'infra_error',
    exitCode: null,
    signal: null,
    durationMs: performance.now() - started,
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    error,
  };
}

/**
 * What a capture keeps of each stream without asking its budget: a command that prints little is
 * never cut, however much other commands hold.
 */
export const CAPTURE_FLOOR_BYTES = 64 << 10;

/**
 * Keeps the first `cap` bytes of a stream and counts the rest. With a `budget`, bytes past the
 * first CAPTURE_FLOOR_BYTES are kept only while the budget grants them: once it refuses, nothing
 * more is kept (`budgetCut`), so the capture never holds more than it was granted.
 */
export class CappedBuffer {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  total = 0;
  /** The budget refused: what was kept stops short of `cap`. */
  budgetCut = false;
  constructor(
    readonly cap: number,
    private readonly budget?: ByteGrant,
  ) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.kept >= this.cap || this.budgetCut) return;
    const take = Math.min(chunk.length, this.cap - this.kept);
    const asked = Math.min(take, this.kept + take - CAPTURE_FLOOR_BYTES);
    if (this.budget !== undefined && asked > 0 && !this.budget.take(asked)) {
      this.budgetCut = true;
      const free = take - asked;
      if (free > 0) this.keep(chunk.subarray(0, free));
      return;
    }
    this.keep(take === chunk.length ? chunk : chunk.subarray(0, take));
  }

  private keep(part: Buffer): void {
    this.chunks.push(part);
    this.kept += part.length;
  }

  /** Bytes kept so far. */
  get bytesKept(): number {
    return this.kept;
  }

  bytes(end = this.total): Buffer {
    return Buffer.concat(this.chunks, this.kept).subarray(0, Math.min(end, this.kept));
  }

  /** The first min(kept, end) bytes, as text; and whether bytes before `end` were dropped. */
  slice(end = this.total): { text: string; truncated: boolean } {
    const buf = Buffer.concat(this.chunks, this.kept);
    // one copy kept from here on: the chunks can go before the text is made
    this.chunks.splice(0, this.chunks.length, buf);
    return { text: buf.subarray(0, Math.min(end, this.kept)).toString('utf8'), truncated: end > this.kept };
  }
}

/**
 * Finds a sentinel in a capped stream without keeping the stream: the head is capped and a short
 * tail window catches a sentinel that straddles chunk boundaries.
 */
export class SentinelScanner {
  readonly out: CappedBuffer;
  private tail = Buffer.alloc(0);
  private readonly window: number;
  constructor(
    cap: number,
    private readonly pattern: RegExp,
    maxSentinelBytes = 128,
    budget?: ByteGrant,
  ) {
    this.out = new CappedBuffer(cap, budget);
    this.window = maxSentinelBytes;
  }

  /** Feeds a chunk; returns the sentinel's match and its stream offset once seen. */
  push(chunk: Buffer): { match: RegExpExecArray; offset: number } | undefined {
    const before = this.out.total;
    this.out.push(chunk);
    const windowBuf = Buffer.concat([this.tail, chunk]);
    const windowStart = before - this.tail.length;
    const m = this.pattern.exec(windowBuf.toString('latin1'));
    this.tail = windowBuf.subarray(Math.max(0, windowBuf.length - this.window));
    if (m === null) return undefined;
    return { match: m, offset: windowStart + m.index };
  }
}

export function signalFromExitCode(code: number): string | null {
  if (code <= 128 || code > 128 + 64) return null;
  const n = code - 128;
  const names: Record<number, string> = {
    1: 'SIGHUP',
    2: 'SIGINT',
    3: 'SIGQUIT',
    4: 'SIGILL',
    6: 'SIGABRT',
    7: 'SIGBUS',
    8: 'SIGFPE',
    9: 'SIGKILL',
    11: 'SIGSEGV',
    13: 'SIGPIPE',
    14: 'SIGALRM',
    15: 'SIGTERM',
    24: 'SIGXCPU',
    25: 'SIGXFSZ',
  };
  return names[n] ?? `SIG${n}`;
}
