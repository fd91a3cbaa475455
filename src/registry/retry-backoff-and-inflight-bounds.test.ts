import { describe, expect, it } from 'vitest';
import { NotFoundError } from '../errors.js';
import { RemoteStoreError, TruncatedBodyError, backoffDelayMs, isRetryable, withRetry } from './retry.js';
import { InFlightBudget } from './s3-inflight.js';

const sdkError = (name: string, status?: number): Error =>
  Object.assign(new Error(name), { name, ...(status === undefined ? {} : { $metadata: { httpStatusCode: status } }) });

describe('retry classification and backoff', () => {
  it('retries throttling, 5xx, timeouts, resets and truncated bodies, and nothing else', () => {
    for (const e of [
      sdkError('SlowDown', 503),
      sdkError('InternalError', 500),
      sdkError('Whatever', 429),
      sdkError('TimeoutError'),
      Object.assign(new Error('x'), { code: 'ECONNRESET' }),
      new Error('socket hang up'),
      new TruncatedBodyError('GET k', 10, 5),
      new Error('outer', { cause: Object.assign(new Error('inner'), { code: 'EPIPE' }) }),
    ]) {
      expect(isRetryable(e), String(e)).toBe(true);
    }
    for (const e of [
      sdkError('AccessDenied', 403),
      sdkError('NoSuchKey', 404),
      sdkError('PreconditionFailed', 412),
      sdkError('InvalidRange', 416),
      new NotFoundError('blob'),
    ]) {
      expect(isRetryable(e), String(e)).toBe(false);
    }
  });

  it('draws backoff with full jitter under an exponential cap', () => {
    const policy = { attempts: 10, baseDelayMs: 100, maxDelayMs: 1000 };
    expect(backoffDelayMs(policy, 1, () => 0.999)).toBe(99);
    expect(backoffDelayMs(policy, 3, () => 0.999)).toBe(399);
    expect(backoffDelayMs(policy, 9, () => 0.999)).toBe(999);
    expect(backoffDelayMs(policy, 4, () => 0)).toBe(0);
  });

  it('stops at the first non-retryable error and after the last attempt, with a typed error', async () => {
    let calls = 0;
    await expect(
      withRetry('op', { attempts: 5, baseDelayMs: 1, maxDelayMs: 1 }, async () => {
        calls++;
        throw sdkError('AccessDenied', 403);
      }),
    ).rejects.toMatchObject({ code: 'REMOTE_STORE', attempts: 1, status: 403 });
    expect(calls).toBe(1);
    calls = 0;
    const err = await withRetry('op', { attempts: 3, baseDelayMs: 1, maxDelayMs: 1 }, async () => {
      calls++;
      throw sdkError('SlowDown', 503);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteStoreError);
    expect(calls).toBe(3);
    await expect(
      withRetry('op', { attempts: 3, baseDelayMs: 1, maxDelayMs: 1 }, async () => {
        throw new NotFoundError('blob x');
      }),
    ).rejects.toBeInstanceOf(NotFoundError);
    let n = 0;
    expect(
      await withRetry('op', { attempts: 3, baseDelayMs: 1, maxDelayMs: 1 }, async () => (++n < 3 ? Promise.reject(sdkError('InternalError', 500)) : 'ok')),
    ).toBe('ok');
  });
});

describe('in-flight budget', () => {
  it('admits in order within both bounds and clamps a request larger than the byte budget', async () => {
    const b = new InFlightBudget({ maxRequests: 2, maxBytes: 100 });
    const order: string[] = [];
    const r1 = await b.acquire(60);
    const p2 = b.acquire(60).then((rel) => (order.push('60'), rel));
    const p3 = b.acquire(10).then((rel) => (order.push('10'), rel));
    await new Promise((r) => setTimeout(r, 10));
    // FIFO: the small request does not overtake the large one waiting for bytes.
    expect(order).toEqual([]);
    r1();
    const r2 = await p2;
    const r3 = await p3;
    expect(order).toEqual(['60', '10']);
    r2();
    r3();
    r3(); // releasing twice is harmless
    const huge = await b.acquire(10_000);
    expect(b.peakBytes).toBe(100);
    huge();
    expect(b.peakRequests).toBe(2);
  });
});
