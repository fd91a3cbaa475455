/**
 * The X-Request-ID cache on its own: one run per (key, id), shared by calls that overlap it,
 * errors replayed only where they are the answer, and bounded per key, in keys and in the bytes of
 * the answers kept.
 */
import { describe, expect, it } from 'vitest';
import { ReplayCache } from './swerex-replay.js';

describe('ReplayCache', () => {
  it('runs once per key and request id, also for calls that arrive while the first runs', async () => {
    const cache = new ReplayCache();
    let runs = 0;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const work = async (): Promise<number> => {
      runs++;
      await gate;
      return runs;
    };
    const first = cache.once('k', 'r1', work);
    const second = cache.once('k', 'r1', work);
    release();
    expect(await Promise.all([first, second])).toEqual([1, 1]);
    expect(await cache.once('k', 'r1', work)).toBe(1);
    // the same id under another key is another request
    expect(await cache.once('other', 'r1', work)).toBe(2);
    expect(runs).toBe(2);
  });

  it('replays an error that is the answer, and runs again after one that is not', async () => {
    const cache = new ReplayCache();
    let runs = 0;
    const failing = async (): Promise<never> => {
      runs++;
      throw new Error(`failure ${runs}`);
    };
    const keepAll = () => true;
    await expect(cache.once('k', 'a', failing, keepAll)).rejects.toThrow('failure 1');
    await expect(cache.once('k', 'a', failing, keepAll)).rejects.toThrow('failure 1');
    const keepNone = () => false;
    await expect(cache.once('k', 'b', failing, keepNone)).rejects.toThrow('failure 2');
    await expect(cache.once('k', 'b', failing, keepNone)).rejects.toThrow('failure 3');
  });

  it('keeps a bounded number of answers per key and of keys, dropping the oldest', async () => {
    const cache = new ReplayCache({ perKey: 2, keys: 2 });
    let runs = 0;
    const work = async (): Promise<number> => ++runs;
    for (const id of ['a', 'b', 'c']) await cache.once('k1', id, work);
    expect(await cache.once('k1', 'c', work)).toBe(3);
    expect(await cache.once('k1', 'a', work)).toBe(4); // dropped: ran again
    await cache.once('k2', 'x', work);
    await cache.once('k3', 'x', work); // k1 is now the least recently used key: dropped
    expect(await cache.once('k3', 'x', work)).toBe(6);
    expect(await cache.once('k1', 'c', work)).toBe(7);
  });

  it('keeps answers up to a total size, dropping the oldest finished ones first, whatever their key', async () => {
    const cache = new ReplayCache({ perKey: 64, keys: 64, bytes: 10 }, (o) => (o.ok ? String(o.value).length : 0));
    let runs = 0;
    const answer = (text: string) => async (): Promise<string> => {
      runs++;
      return text;
    };
    await cache.once('k1', 'a', answer('xxxx'));
    await cache.once('k2', 'b', answer('yyyy'));
    expect(await cache.once('k1', 'a', answer('new'))).toBe('xxxx');
    // 12 characters in all: the oldest (k1/a) goes, though its key was used last
    await cache.once('k2', 'c', answer('zzzz'));
    expect(runs).toBe(3);
    expect(await cache.once('k1', 'a', answer('again'))).toBe('again');
    expect(await cache.once('k2', 'c', answer('not run'))).toBe('zzzz');
  });
});
