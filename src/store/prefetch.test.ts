import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { LocalRegistry } from '../registry/local.js';
import type { Registry } from '../registry/registry.js';
import { StorePaths } from './paths.js';
import { ByteBudget, prefetch } from './prefetch.js';
import { pushTree } from '../publish/push.js';

const work = mkdtempSync(join(tmpdir(), 'ms-prefetch-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('ByteBudget', () => {
  it('admits requests while they fit, queues the rest in order, and clamps one larger than the whole', async () => {
    const b = new ByteBudget(100);
    const order: string[] = [];
    expect(await b.acquire(60)).toBe(60);
    const second = b.acquire(50).then((n) => order.push(`second ${n}`));
    const third = b.acquire(10).then((n) => order.push(`third ${n}`));
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]); // the third would fit, but must not overtake the second
    b.release(60);
    await Promise.all([second, third]);
    expect(order).toEqual(['second 50', 'third 10']);
    b.release(50);
    b.release(10);
    expect(await b.acquire(1000)).toBe(100);
  });
});

describe('prefetch', () => {
  it('pulls every environment, never holding more compressed bytes in flight than the budget', async () => {
    const inner = new LocalRegistry(join(work, 'registry'));
    const refs: string[] = [];
    for (let i = 0; i < 4; i++) {
      makeRandomTree(join(work, `src-${i}`), 100 + i, 60);
      await pushTree(inner, new StorePaths(join(work, 'push')), join(work, `src-${i}`), { tag: `p/e${i}` });
      refs.push(`p/e${i}`);
    }
    // count range-read bytes in flight through a registry wrapper
    let inFlight = 0;
    let peak = 0;
    const reg: Registry = Object.create(inner) as Registry;
    // as a remote backend would: without a local file for the lay-out's helper to read itself,
    // every range goes through getBlobRange
    Object.defineProperty(reg, 'localFile', { value: undefined });
    reg.getBlobRange = async (d, off, len) => {
      inFlight += len;
      peak = Math.max(peak, inFlight);
      try {
        return await inner.getBlobRange(d, off, len);
      } finally {
        inFlight -= len;
      }
    };
    let biggest = 0;
    for await (const b of inner.listBlobs()) biggest = Math.max(biggest, b.size);
    const budget = biggest + 1;
    const store = new StorePaths(join(work, 'store'));
    const results = await prefetch(reg, store, [...refs, 'p/missing'], { idShift: 0, jobs: 4, budgetBytes: budget });
    expect(
      results
        .filter((r) => r.status === 'pulled')
        .map((r) => r.ref)
        .sort(),
    ).toEqual(refs);
    expect(results.find((r) => r.ref === 'p/missing')).toMatchObject({ status: 'failed' });
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(budget);
    const again = await prefetch(reg, store, refs, { idShift: 0, jobs: 4, budgetBytes: budget });
    expect(again.every((r) => r.status === 'present')).toBe(true);
  });
});
