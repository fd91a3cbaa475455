/**
 * The runtime's side of the launcher protocol, fuzzed (seeded, a fixed number of cases): an event
 * line it does not understand, an O header whose length is no length (one used to spin the reader
 * forever), a run of bytes without a newline, are skipped and reported, and the event after them
 * is read as itself, however the stream is cut into chunks. Requests the server would refuse are
 * refused here first, as typed errors.
 */
import { describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { MinisandboxError } from '../errors.js';
import { encodeRequest, EventReader, type LauncherEvent, recordLimits } from './launcher-protocol.js';

function read(chunks: Buffer[]): { events: LauncherEvent[]; malformed: string[] } {
  const events: LauncherEvent[] = [];
  const malformed: string[] = [];
  const r = new EventReader(
    (e) => events.push(e.kind === 'O' ? { ...e, data: Buffer.from(e.data) } : e),
    (l) => malformed.push(l),
  );
  for (const c of chunks) r.push(c);
  return { events, malformed };
}

describe('launcher events', () => {
  it('reads every kind, an O frame with its raw bytes (newlines included)', () => {
    const { events, malformed } = read([Buffer.from('R h1 10 11\nE h2 125 cannot start: é\nX h1 137\nP x1 12\nO x1 1 4\na\nb\nW x1 4\nD x1 -1 9\nZ x1\n')]);
    expect(malformed).toEqual([]);
    expect(events).toEqual([
      { kind: 'R', id: 'h1', holderPid: 10, initPid: 11 },
      { kind: 'E', id: 'h2', status: 125, message: 'cannot start: é' },
      { kind: 'X', id: 'h1', status: 137 },
      { kind: 'P', id: 'x1', pid: 12 },
      { kind: 'O', id: 'x1', stream: 1, data: Buffer.from('a\nb\n') },
      { kind: 'W', id: 'x1', bytes: 4 },
      { kind: 'D', id: 'x1', code: -1, signal: 9 },
      { kind: 'Z', id: 'x1' },
    ]);
  });

  it('skips an O header whose length is none, where it used to loop forever', () => {
    const { events, malformed } = read([Buffer.from('O x1 1 abc\nO x1 7 3\nO x1 1 99999999999\nZ x1\n')]);
    expect(events).toEqual([{ kind: 'Z', id: 'x1' }]);
    expect(malformed).toHaveLength(3);
  });

  it('reads the event after any garbage line as itself, whatever the chunks (2000 seeded cases)', () => {
    const r = rng(0x25);
    const int = (n: number) => Math.floor(r() * n);
    const tokens = ['R', 'E', 'X', 'P', 'O', 'W', 'D', 'Z', 'x1', 'h1', '-1', '99999999999', 'abc', '', ' ', '\r', '\0', 'é', 'x'.repeat(70)];
    for (let c = 0; c < 2000; c++) {
      const parts: Buffer[] = [];
      const want: string[] = [];
      for (let i = 0; i < 5; i++) {
        let line: Buffer;
        if (int(3) === 0) line = Buffer.from(Array.from({ length: int(80) }, () => int(256)).filter((b) => b !== 10));
        else line = Buffer.from(Array.from({ length: int(6) }, () => tokens[int(tokens.length)]).join(' '));
        // a valid O header takes the bytes after it, as it must: garbage lines are anything but that
        if (/^O [A-Za-z0-9._-]{1,64} [123] \d{1,8}$/.test(line.toString('latin1'))) line = Buffer.from(`#${line.toString('latin1')}`, 'latin1');
        parts.push(line, Buffer.from(`\nZ s${c}-${i}\n`));
        want.push(`s${c}-${i}`);
      }
      // now and then a run of bytes past any event line's length before its newline
      if (int(10) === 0) {
        parts.push(Buffer.alloc(70_000, 'y'), Buffer.from(`\nZ s${c}-long\n`));
        want.push(`s${c}-long`);
      }
      const stream = Buffer.concat(parts);
      const cuts = Array.from({ length: int(6) }, () => int(stream.length)).sort((a, b) => a - b);
      const chunks = [0, ...cuts].map((at, k, all) => stream.subarray(at, all[k + 1] ?? stream.length));
      const whole = read([stream]);
      const cut = read(chunks);
      const sentinels = (es: LauncherEvent[]) => es.filter((e) => e.kind === 'Z' && e.id.startsWith('s')).map((e) => e.id);
      expect(sentinels(whole.events)).toEqual(want);
      expect(sentinels(cut.events)).toEqual(want);
    }
  });

  it('refuses, as typed errors, requests the server would refuse', () => {
    const refused = (fields: string[], limits = recordLimits()) => {
      try {
        encodeRequest(fields, limits);
      } catch (e) {
        return e instanceof MinisandboxError ? e.code : 'untyped';
      }
      return 'sent';
    };
    expect(refused(['X', 'x1', '0', '--', 'true'])).toBe('sent');
    expect(refused(['X', 'x 1', '0'])).toBe('INVALID_INPUT');
    expect(refused(['X', 'x1', '0', 'a\0b'])).toBe('INVALID_INPUT');
    expect(refused(['X', 'x1', '0', 'a'.repeat(100)], { bytes: 100, fields: 10 })).toBe('INVALID_INPUT');
    expect(refused(['X', 'x1', '0', ...Array.from({ length: 10 }, () => 'a')], { bytes: 1000, fields: 10 })).toBe('INVALID_INPUT');
  });
});
