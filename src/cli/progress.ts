/**
 * Progress of long work (pull, build, import, copy) as people and scripts can follow it: on a
 * terminal one bar line, redrawn a few times a second, with the phase, bytes done of the total
 * (compressed bytes fetched, uncompressed bytes laid out or captured), the rate, the elapsed time
 * and an ETA; into a file or pipe with `--progress plain`, a line whenever the phase changes and
 * at least every few seconds while work runs (never silent for the minutes a build command takes);
 * as JSON lines (`--progress json`, the default off a terminal), an event on a phase change and
 * every couple of seconds, every size and duration named with its unit.
 * Loaded by the commands that do such work only: never on the `run` path (start-up, see main.ts).
 */
import { formatBytes } from './output.js';

/** What the view draws on: the command's Output (cli/output.ts). */
export interface ProgressSink {
  readonly progressMode: 'plain' | 'json' | 'none';
  readonly tty: boolean;
  readonly columns: number;
  redraw(text: string): void;
  line(text: string): void;
  event(event: Record<string, unknown>): void;
  done(): void;
}

export interface ProgressState {
  phase: string;
  /** What is being worked on: a ref, a node's label and its own phase and time (made when drawn), ... */
  subject?: string | (() => string);
  /** Whole units done of a total, named by `unit` (environments, nodes, refs). */
  itemsDone?: number;
  itemsTotal?: number;
  unit?: string;
  /** Compressed bytes fetched (or copied) and their total. */
  compressedDoneBytes?: number;
  compressedTotalBytes?: number;
  /** Uncompressed bytes laid out (or captured) and their total. */
  doneBytes?: number;
  totalBytes?: number;
  /** What the uncompressed bytes are, for the line: `laid out`, `captured`. */
  bytesVerb?: string;
  /** Where the details are written (a build log). */
  log?: string;
  /** More for the JSON events only (camelCase, units in names; made when emitted). */
  fields?: Record<string, unknown> | (() => Record<string, unknown>);
}

export interface ProgressTiming {
  /** The line of a terminal is redrawn this often. */
  redrawMs: number;
  /** Plain lines and JSON events come on a phase change no more often than this... */
  changeMs: number;
  /** ...and at least this often while the work runs. */
  heartbeatMs: number;
}

export const DEFAULT_TIMING: ProgressTiming = { redrawMs: 200, changeMs: 1000, heartbeatMs: 5000 };

/** How far back the rate looks: long enough to smooth frame-sized steps, short enough to follow a change. */
const RATE_WINDOW_MS = 5000;

export class ProgressView {
  private state: ProgressState;
  private readonly t0: number;
  private timer: ReturnType<typeof setInterval> | undefined;
  private lastOut = -Infinity;
  private lastPhase: string | undefined;
  private readonly samples: Array<{ at: number; bytes: number }> = [];

  constructor(
    private readonly sink: ProgressSink,
    /** The command, first on every line: `pull`, `build`. */
    private readonly what: string,
    initial: ProgressState,
    private readonly timing: ProgressTiming = DEFAULT_TIMING,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.state = initial;
    this.t0 = now();
    const bytes = this.rateBytes();
    if (bytes !== undefined) this.samples.push({ at: this.t0, bytes });
    if (sink.progressMode === 'none') return;
    const every = sink.progressMode === 'plain' && sink.tty ? timing.redrawMs : Math.min(timing.changeMs, timing.heartbeatMs) / 2;
    this.timer = setInterval(() => this.tick(), every);
    this.timer.unref();
    this.tick();
  }

  /** Merges what changed; a new phase is said at the next tick (at once where nothing was said lately). */
  set(update: Partial<ProgressState>): void {
    this.state = { ...this.state, ...update };
    const bytes = this.rateBytes();
    // bytes of another thing now (the next node's capture): the rate starts over
    const latest = this.samples.at(-1);
    if (bytes === undefined || (latest !== undefined && bytes < latest.bytes)) this.samples.length = 0;
    if (bytes !== undefined) {
      const at = this.now();
      this.samples.push({ at, bytes });
      while (this.samples.length > 2 && this.samples[1]!.at < at - RATE_WINDOW_MS) this.samples.shift();
    }
    if (update.phase !== undefined && update.phase !== this.lastPhase && this.now() - this.lastOut >= this.timing.changeMs) this.tick();
  }

  /** Draws, writes or emits what is due now. */
  tick(): void {
    const mode = this.sink.progressMode;
    if (mode === 'none') return;
    const now = this.now();
    if (mode === 'plain' && this.sink.tty) {
      this.sink.redraw(this.text(now, this.sink.columns));
      this.lastOut = now;
      this.lastPhase = this.state.phase;
      return;
    }
    const changed = this.state.phase !== this.lastPhase;
    const since = now - this.lastOut;
    if (!(since >= this.timing.heartbeatMs || (changed && since >= this.timing.changeMs))) return;
    this.lastOut = now;
    this.lastPhase = this.state.phase;
    if (mode === 'json') this.sink.event(this.event(now));
    else this.sink.line(this.text(now, Infinity));
  }

  /** Stops the timer and clears a terminal's line (the command's result follows). */
  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.sink.done();
  }

  /** The bytes the rate and ETA follow: compressed bytes fetched where there are any, else the others. */
  private rateBytes(): number | undefined {
    return this.state.compressedTotalBytes !== undefined ? this.state.compressedDoneBytes : this.state.doneBytes;
  }

  private rateTotal(): number | undefined {
    return this.state.compressedTotalBytes ?? this.state.totalBytes;
  }

  /** Bytes a second over the last few seconds; undefined until there are two samples apart in time. */
  rate(now: number): number | undefined {
    const first = this.samples[0];
    const last = this.samples.at(-1);
    if (first === undefined || last === undefined || last.at - first.at < 200) return undefined;
    // a window that ends in the past (nothing arrived since) counts the quiet time too
    return ((last.bytes - first.bytes) * 1000) / (Math.max(now, last.at) - first.at);
  }

  private etaMs(now: number): number | undefined {
    const r = this.rate(now);
    const total = this.rateTotal();
    const done = this.rateBytes();
    if (r === undefined || r <= 0 || total === undefined || done === undefined) return undefined;
    return (Math.max(0, total - done) / r) * 1000;
  }

  /** The line a person reads (one terminal row where `width` is finite: the least useful parts go first). */
  text(now: number, width: number): string {
    const s = this.state;
    const head = `${this.what}${s.itemsTotal !== undefined ? ` ${s.itemsDone ?? 0}/${s.itemsTotal}${s.unit ? ` ${s.unit}` : ''}` : ''}`;
    const parts: string[] = [s.phase];
    const subject = typeof s.subject === 'function' ? s.subject() : s.subject;
    if (subject !== undefined && subject !== '') parts.push(subject);
    if (s.compressedTotalBytes !== undefined) parts.push(`${ofTotal(s.compressedDoneBytes ?? 0, s.compressedTotalBytes)} compressed`);
    if (s.doneBytes !== undefined)
      parts.push(`${s.totalBytes === undefined ? formatBytes(s.doneBytes) : ofTotal(s.doneBytes, s.totalBytes)} ${s.bytesVerb ?? 'done'}`);
    const r = this.rate(now);
    if (r !== undefined && r > 0) parts.push(`${formatBytes(Math.round(r))}/s`);
    parts.push(clockText(now - this.t0));
    const eta = this.etaMs(now);
    if (eta !== undefined) parts.push(`ETA ${clockText(eta)}`);
    if (s.log !== undefined) parts.push(`log ${s.log}`);
    const total = this.rateTotal();
    const done = this.rateBytes();
    const fraction = total !== undefined && total > 0 && done !== undefined ? done / total : s.itemsTotal ? (s.itemsDone ?? 0) / s.itemsTotal : undefined;
    const bar = width !== Infinity && fraction !== undefined ? ` [${barText(fraction, 16)}]` : '';
    let line = `${head}${bar} ${parts.join(' · ')}`;
    // on a terminal row, the subject gives way first (the numbers are what a bar is for)
    if (line.length > width && subject !== undefined) line = `${head}${bar} ${parts.filter((p) => p !== subject).join(' · ')}`;
    return line;
  }

  /** The JSON event: sizes in bytes, durations in milliseconds, rate in bytes a second. */
  event(now: number): Record<string, unknown> {
    const s = this.state;
    const r = this.rate(now);
    const eta = this.etaMs(now);
    const defined = (o: Record<string, unknown>): Record<string, unknown> => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
    return defined({
      command: this.what,
      phase: s.phase,
      subject: typeof s.subject === 'function' ? s.subject() : s.subject,
      ...(s.unit !== undefined ? { unit: s.unit } : {}),
      itemsDone: s.itemsDone,
      itemsTotal: s.itemsTotal,
      compressedDoneBytes: s.compressedDoneBytes,
      compressedTotalBytes: s.compressedTotalBytes,
      doneBytes: s.doneBytes,
      totalBytes: s.totalBytes,
      bytesPerSecond: r === undefined ? undefined : Math.round(r),
      elapsedMs: Math.round(now - this.t0),
      etaMs: eta === undefined ? undefined : Math.round(eta),
      log: s.log,
      ...(typeof s.fields === 'function' ? s.fields() : s.fields),
      message: this.text(now, Infinity),
    });
  }
}

function ofTotal(done: number, total: number): string {
  return `${formatBytes(done)}/${formatBytes(total)}`;
}

/** 0:04, 2:13, 1:02:03. */
export function clockText(ms: number): string {
  const t = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(t / 3600);
  const m = Math.floor((t % 3600) / 60);
  const sec = String(t % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}

function barText(fraction: number, width: number): string {
  const n = Math.max(0, Math.min(width, Math.round(fraction * width)));
  return `${'#'.repeat(n)}${'.'.repeat(width - n)}`;
}
