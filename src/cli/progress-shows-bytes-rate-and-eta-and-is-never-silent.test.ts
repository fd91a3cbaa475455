/**
 * The progress view (progress.ts) on a fake clock: a terminal gets one redrawn bar line with the
 * phase, compressed and uncompressed bytes of their totals, the rate, elapsed time and ETA; plain
 * lines into a file keep coming while nothing changes (a build command running for minutes was
 * silent); JSON events name their units.
 */
import { describe, expect, it } from 'vitest';
import { clockText, type ProgressSink, ProgressView } from './progress.js';

class FakeSink implements ProgressSink {
  readonly lines: string[] = [];
  readonly events: Record<string, unknown>[] = [];
  drawn = '';
  cleared = 0;
  constructor(
    readonly progressMode: 'plain' | 'json' | 'none',
    readonly tty: boolean,
    readonly columns = 200,
  ) {}
  redraw(text: string): void {
    this.drawn = text;
  }
  line(text: string): void {
    this.lines.push(text);
  }
  event(e: Record<string, unknown>): void {
    this.events.push(e);
  }
  done(): void {
    this.cleared++;
  }
}

const MiB = 1024 * 1024;
const timing = { redrawMs: 200, changeMs: 1000, heartbeatMs: 5000 };

describe('progress of long work', () => {
  it('draws a bar with phase, bytes of totals, rate, elapsed and ETA on a terminal', () => {
    let now = 0;
    const sink = new FakeSink('plain', true);
    const v = new ProgressView(sink, 'pull', { phase: 'resolve', itemsDone: 0, itemsTotal: 1, unit: 'envs' }, timing, () => now);
    v.set({ phase: 'fetch', compressedDoneBytes: 0, compressedTotalBytes: 100 * MiB, doneBytes: 0, totalBytes: 300 * MiB, bytesVerb: 'laid out' });
    now = 2000;
    v.set({ compressedDoneBytes: 20 * MiB, doneBytes: 60 * MiB });
    v.tick();
    expect(sink.drawn).toBe(
      'pull 0/1 envs [###.............] fetch · 20.0 MiB/100.0 MiB compressed · 60.0 MiB/300.0 MiB laid out · 10.0 MiB/s · 0:02 · ETA 0:08',
    );
    v.stop();
    expect(sink.cleared).toBe(1);
  });

  it('writes a plain line into a file at least every few seconds while a phase runs for minutes', () => {
    let now = 0;
    const sink = new FakeSink('plain', false);
    const v = new ProgressView(sink, 'build', { phase: 'commands', subject: 'env py311', log: '/s/logs/env.log' }, timing, () => now);
    for (now = 0; now <= 120_000; now += 500) v.tick();
    v.stop();
    // one at the start, then one every 5 s: 2 minutes of one phase are 25 lines, none empty
    expect(sink.lines).toHaveLength(25);
    expect(sink.lines[24]).toBe('build commands · env py311 · 2:00 · log /s/logs/env.log');
    expect(sink.drawn).toBe('');
  });

  it('says a new phase at once, but not more than once a second', () => {
    let now = 0;
    const sink = new FakeSink('plain', false);
    const v = new ProgressView(sink, 'pull', { phase: 'resolve' }, timing, () => now);
    now = 100;
    v.set({ phase: 'manifest' }); // too soon after the first line
    now = 1200;
    v.set({ phase: 'fetch' });
    v.stop();
    expect(sink.lines.map((l) => l.split(' ')[1])).toEqual(['resolve', 'fetch']);
  });

  it('emits JSON events with units in their names, and nothing with --progress none', () => {
    let now = 0;
    const sink = new FakeSink('json', false);
    const v = new ProgressView(sink, 'pull', { phase: 'fetch', compressedDoneBytes: 0, compressedTotalBytes: 4 * MiB }, timing, () => now);
    now = 1000;
    v.set({ compressedDoneBytes: 1 * MiB, fields: { ref: 'd/x' } });
    now = 5000;
    v.tick();
    v.stop();
    const last = sink.events.at(-1);
    expect(last).toMatchObject({
      command: 'pull',
      phase: 'fetch',
      compressedDoneBytes: MiB,
      compressedTotalBytes: 4 * MiB,
      bytesPerSecond: 209715,
      elapsedMs: 5000,
      etaMs: 15000,
      ref: 'd/x',
    });
    for (const k of Object.keys(last ?? {})) expect(k).toMatch(/^(command|phase|ref|message|[a-zA-Z]+(Bytes|Ms|PerSecond))$/);
    const none = new FakeSink('none', true);
    const quiet = new ProgressView(none, 'pull', { phase: 'fetch' }, timing, () => now);
    quiet.tick();
    quiet.stop();
    expect([none.drawn, none.lines, none.events]).toEqual(['', [], []]);
  });

  it('writes clock times as people read them', () => {
    expect([clockText(4000), clockText(133_000), clockText(3_723_000)]).toEqual(['0:04', '2:13', '1:02:03']);
  });
});
