import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type NodeOutcome, type ScheduleNode, runGraph } from './plan-schedule.js';

const node = (id: string, ...deps: string[]): ScheduleNode => ({ id, deps });

/** base -> envA -> i1, i2 ; base -> envB -> i3, i4 ; plus an independent chain x -> y */
const GRAPH = [
  node('base'),
  node('envA', 'base'),
  node('envB', 'base'),
  node('i1', 'envA'),
  node('i2', 'envA'),
  node('i3', 'envB'),
  node('i4', 'envB'),
  node('x'),
  node('y', 'x'),
];

function statuses(m: Map<string, NodeOutcome<unknown>>): Record<string, string> {
  return Object.fromEntries([...m].map(([id, o]) => [id, o.status === 'skipped' ? `skipped(${o.cause})` : o.status]));
}

describe('runGraph', () => {
  it('never runs more than `jobs` nodes at once and runs every node after its deps', async () => {
    let now = 0;
    let peak = 0;
    const finished = new Set<string>();
    const out = await runGraph(
      GRAPH,
      async (n) => {
        for (const d of n.deps) expect(finished.has(d)).toBe(true);
        peak = Math.max(peak, ++now);
        await sleep(15);
        now--;
        finished.add(n.id);
        return n.id.toUpperCase();
      },
      { jobs: 3, keepGoing: false },
    );
    expect(peak).toBe(3);
    expect(finished.size).toBe(GRAPH.length);
    const i4 = out.get('i4');
    expect(i4?.status === 'ok' && i4.value).toBe('I4');
  });

  it('with keepGoing, skips the dependents of a failure and finishes everything else', async () => {
    const out = await runGraph(
      GRAPH,
      async (n) => {
        await sleep(2);
        if (n.id === 'envA') throw new Error('apt-get failed');
      },
      { jobs: 2, keepGoing: true },
    );
    expect(statuses(out)).toEqual({
      base: 'ok',
      envA: 'failed',
      envB: 'ok',
      i1: 'skipped(envA)',
      i2: 'skipped(envA)',
      i3: 'ok',
      i4: 'ok',
      x: 'ok',
      y: 'ok',
    });
    const f = out.get('envA');
    expect(f?.status === 'failed' && (f.error as Error).message).toBe('apt-get failed');
  });

  it('without keepGoing, stops starting nodes after a failure, lets running ones finish and signals them', async () => {
    let sawAbort = false;
    const out = await runGraph(
      [node('a'), node('slow'), node('b', 'a'), node('c')],
      async (n, signal) => {
        if (n.id === 'a') throw new Error('boom');
        if (n.id === 'slow') {
          await sleep(30);
          sawAbort = signal.aborted;
        }
      },
      { jobs: 2, keepGoing: false },
    );
    expect(statuses(out)).toEqual({ a: 'failed', slow: 'ok', b: 'skipped(a)', c: 'cancelled' });
    expect(sawAbort).toBe(true);
  });

  it('retries a node whose error is retryable, up to the attempt limit, and not one whose error is not', async () => {
    const tries = new Map<string, number>();
    const transient = Object.assign(new Error('ECONNRESET'), { transient: true });
    const out = await runGraph(
      [node('flaky'), node('down'), node('broken'), node('after', 'flaky')],
      async (n) => {
        const k = (tries.get(n.id) ?? 0) + 1;
        tries.set(n.id, k);
        if (n.id === 'flaky' && k < 3) throw transient;
        if (n.id === 'down') throw transient;
        if (n.id === 'broken') throw new Error('exit 1');
      },
      { jobs: 2, keepGoing: true, retry: { attempts: 3, backoffMs: 1, retryable: (e) => (e as { transient?: boolean }).transient === true } },
    );
    expect(statuses(out)).toEqual({ flaky: 'ok', down: 'failed', broken: 'failed', after: 'ok' });
    expect(Object.fromEntries(tries)).toEqual({ flaky: 3, down: 3, broken: 1, after: 1 });
    const f = out.get('flaky');
    expect(f?.status === 'ok' && f.attempts).toBe(3);
  });

  it('rejects cycles and unknown deps before running anything', async () => {
    let ran = 0;
    const count = async (): Promise<void> => void ran++;
    await expect(runGraph([node('a', 'b'), node('b', 'a')], count, { jobs: 1, keepGoing: true })).rejects.toThrow(/cycle a -> b -> a/);
    await expect(runGraph([node('a', 'zz')], count, { jobs: 1, keepGoing: true })).rejects.toThrow(/unknown node zz/);
    expect(ran).toBe(0);
  });
});
