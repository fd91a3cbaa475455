import { createHash } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { compress } from 'zstd-napi';
import { DecodePool } from './decode-pool.js';

const pool = new DecodePool();
afterAll(() => pool.close());

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

function frameOf(n: number, seed: number): { raw: Buffer; frame: Buffer } {
  const raw = Buffer.alloc(n);
  for (let i = 0; i + 4 <= n; i += 4) raw.writeUInt32LE((i * 40503 + seed) >>> 0, i);
  return { raw, frame: compress(raw) };
}

describe('the decoding worker', () => {
  it('decodes into shared memory that is reused once released, with the digests asked for', async () => {
    const a = frameOf(1 << 20, 1);
    const first = await pool.decode(a.frame, a.raw.length, [
      [0, 100],
      [4096, 50_000],
    ]);
    expect(first.data.equals(a.raw)).toBe(true);
    expect(first.digests).toEqual([sha(a.raw.subarray(0, 100)), sha(a.raw.subarray(4096, 54_096))]);
    expect(first.data.buffer).toBeInstanceOf(SharedArrayBuffer);
    const memory = first.data.buffer;
    pool.release(first.data);
    const b = frameOf(900 << 10, 2);
    const second = await pool.decode(b.frame, b.raw.length);
    expect(second.data.equals(b.raw)).toBe(true);
    // no new memory per frame: the released slot serves the next one
    expect(second.data.buffer).toBe(memory);
    pool.release(second.data);
  });

  it('rejects a frame cut short or decoding past its stated length, and decodes the next one cleanly', async () => {
    const a = frameOf(2 << 20, 3);
    await expect(pool.decode(a.frame.subarray(0, a.frame.length - 10), a.raw.length)).rejects.toThrow(/ends mid-frame/);
    await expect(pool.decode(a.frame, a.raw.length - 1)).rejects.toThrow(/more than the stated/);
    // one decoding context serves every frame: a failure half-way must leave nothing behind
    const ok = await pool.decode(a.frame, a.raw.length, [[0, a.raw.length]]);
    expect(ok.digests).toEqual([sha(a.raw)]);
    pool.release(ok.data);
  });

  it('keeps frames in flight apart: each gets its own memory until released', async () => {
    const frames = [frameOf(3 << 20, 4), frameOf(3 << 20, 5), frameOf(3 << 20, 6)];
    const out = await Promise.all(frames.map((f) => pool.decode(f.frame, f.raw.length)));
    out.forEach((o, i) => expect(o.data.equals(frames[i]!.raw)).toBe(true));
    expect(new Set(out.map((o) => o.data.buffer)).size).toBe(3);
    for (const o of out) pool.release(o.data);
  });

  it('a retained frame keeps its memory until the pin is dropped, even after release', async () => {
    const a = frameOf(1 << 20, 7);
    const first = await pool.decode(a.frame, a.raw.length);
    const unpin = first.retain();
    pool.release(first.data);
    // while pinned, later frames get other memory and the bytes stay as decoded
    const b = frameOf(1 << 20, 8);
    const second = await pool.decode(b.frame, b.raw.length);
    expect(second.data.buffer).not.toBe(first.data.buffer);
    expect(first.data.equals(a.raw)).toBe(true);
    pool.release(second.data);
    unpin();
    unpin(); // idempotent: a second call must not free memory someone else holds
    const c = frameOf(1 << 20, 9);
    const third = await pool.decode(c.frame, c.raw.length);
    const fourth = await pool.decode(c.frame, c.raw.length);
    // the two free slots serve the next two frames; the once-pinned one is among them
    expect([third.data.buffer, fourth.data.buffer]).toContain(first.data.buffer);
    pool.release(third.data);
    pool.release(fourth.data);
  });
});
