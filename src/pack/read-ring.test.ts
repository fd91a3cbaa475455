import { describe, expect, it } from 'vitest';
import { ReadRing } from './read-ring.js';
import { rng } from '../../test/helpers/rng.js';

describe('ReadRing', () => {
  it('hands out regions that never overlap a live one, first-in first-out, and wraps around', () => {
    const ring = new ReadRing(1000);
    const rand = rng(7);
    const live: Array<{ buf: Buffer; fill: number }> = [];
    let wrapped = 0;
    for (let i = 0; i < 5000; i++) {
      const bytes = 1 + Math.floor(rand() * 400);
      let buf = ring.take(bytes);
      while (buf === undefined) {
        expect(live.length).toBeGreaterThan(0); // an empty ring always has room
        const old = live.shift()!;
        // nothing written since overwrote it
        expect(old.buf.every((b) => b === old.fill)).toBe(true);
        ring.release();
        buf = ring.take(bytes);
      }
      if (buf.byteOffset === 0 && live.length > 0) wrapped++;
      expect(buf.length).toBe(bytes);
      const fill = i % 251;
      buf.fill(fill);
      live.push({ buf, fill });
    }
    for (const old of live) expect(old.buf.every((b) => b === old.fill)).toBe(true);
    expect(wrapped).toBeGreaterThan(100);
  });

  it('refuses a region larger than the ring or empty', () => {
    const ring = new ReadRing(10);
    expect(() => ring.take(11)).toThrow(RangeError);
    expect(() => ring.take(0)).toThrow(RangeError);
    expect(ring.take(10)?.length).toBe(10);
    expect(ring.take(1)).toBeUndefined();
    ring.release();
    expect(ring.take(1)?.length).toBe(1);
  });
});
