import { describe, expect, it } from 'vitest';
import { Arrivals } from './arrivals.js';

/** A stand-in decoded frame: its memory and a pin counter, as DecodePool's retain gives. */
function frame(size: number): { data: Buffer; retain: () => () => void; pins: () => number } {
  let pins = 0;
  const retain = (): (() => void) => {
    pins++;
    let done = false;
    return () => {
      if (!done) pins--;
      done = true;
    };
  };
  return { data: Buffer.alloc(size, 7), retain, pins: () => pins };
}

describe('objects held as views of their decoded frame', () => {
  it('are the frame bytes themselves, pin the frame once, and unpin it when the last is taken', () => {
    const arrivals = new Arrivals(64 << 20);
    const f = frame(4 << 20);
    expect(arrivals.hold('a', f.data.subarray(0, 100), f.retain)).toBe(true);
    expect(arrivals.hold('b', f.data.subarray(100, 300), f.retain)).toBe(true);
    expect(f.pins()).toBe(1);
    const a = arrivals.take('a')!;
    expect(a.buffer).toBe(f.data.buffer);
    expect(f.pins()).toBe(1);
    arrivals.take('b');
    expect(f.pins()).toBe(0);
    expect(arrivals.take('a')).toBeUndefined();
  });

  it('count whole frames against the budget: past it they are refused (written to disk instead)', () => {
    const arrivals = new Arrivals(8 << 20);
    const frames = [frame(4 << 20), frame(4 << 20), frame(4 << 20)];
    expect(arrivals.hold('x0', frames[0]!.data.subarray(0, 10), frames[0]!.retain)).toBe(true);
    expect(arrivals.hold('x1', frames[1]!.data.subarray(0, 10), frames[1]!.retain)).toBe(true);
    // a third frame would exceed 8 MiB, however small the object in it
    expect(arrivals.hold('x2', frames[2]!.data.subarray(0, 10), frames[2]!.retain)).toBe(false);
    expect(frames[2]!.pins()).toBe(0);
    // more objects of a frame already held cost nothing more
    expect(arrivals.hold('x0b', frames[0]!.data.subarray(10, 20), frames[0]!.retain)).toBe(true);
    // unless the lay-out waits for it: then it is held whatever the budget
    void arrivals.wait('x2')?.catch(() => undefined);
    expect(arrivals.hold('x2', frames[2]!.data.subarray(0, 10), frames[2]!.retain)).toBe(true);
    expect(frames[2]!.pins()).toBe(1);
  });
});
