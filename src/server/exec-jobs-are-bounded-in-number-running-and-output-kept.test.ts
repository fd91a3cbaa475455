/**
 * Async exec jobs cannot grow the server without bound: a sandbox runs at most
 * --max-jobs-per-sandbox jobs at once (more are refused 429 with Retry-After, as a full server
 * refuses creates), and its finished jobs hold at most --job-output-budget bytes of output (the
 * oldest are dropped first, and asking for one says it expired). Real HTTP, real sandboxes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import type { RunningServer } from './serve.js';

const fx = new ServerFixture();
let srv: RunningServer;
beforeAll(async () => {
  await fx.setUp();
  srv = await fx.serve({ maxJobsPerSandbox: 2, jobOutputBudgetBytes: 3000 });
}, 120_000);
afterAll(() => fx.tearDown());

const call = (method: string, path: string, body?: unknown) => fx.call(method, path, body, { server: srv });

async function startJob(id: string, command: string): Promise<string> {
  const r = await call('POST', `/v1/sandboxes/${id}/exec?async=true`, { command });
  expect(r.status, r.text).toBe(202);
  return r.json().job as string;
}

describe('exec job bounds', () => {
  it('refuses a job past the per-sandbox maximum with 429 and Retry-After, and takes one again once a job ended', async () => {
    const [id, other] = [await fx.create({ ref: 'srv/busybox' }, srv), await fx.create({ ref: 'srv/busybox' }, srv)];
    const markers = [sleepMarker(), sleepMarker()];
    const jobs = [await startJob(id, `sleep ${markers[0]}`), await startJob(id, `sleep ${markers[1]}`)];
    await eventually(() => markers.every(sleepRuns));
    const full = await call('POST', `/v1/sandboxes/${id}/exec?async=true`, { command: 'true' });
    expect(full.status, full.text).toBe(429);
    expect(full.json().error).toMatchObject({ code: 'CAPACITY' });
    expect(JSON.stringify(full.json())).toContain('max-jobs-per-sandbox');
    expect(Number(full.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // a plain exec is no job: it still runs
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'echo hi' })).json()).toMatchObject({ stdout: 'hi\n' });
    // the maximum is per sandbox
    const elsewhere = await startJob(other, 'true');
    expect((await call('GET', `/v1/sandboxes/${other}/jobs/${elsewhere}?wait=300`)).json()).toMatchObject({ status: 'done' });

    expect((await call('DELETE', `/v1/sandboxes/${id}/jobs/${jobs[0]}`)).status).toBe(204);
    const again = await startJob(id, 'echo again');
    expect((await call('GET', `/v1/sandboxes/${id}/jobs/${again}?wait=300`)).json()).toMatchObject({ status: 'done', result: { stdout: 'again\n' } });
    await call('DELETE', `/v1/sandboxes/${id}`);
    await call('DELETE', `/v1/sandboxes/${other}`);
    expect(markers.some(sleepRuns)).toBe(false);
  });

  it("keeps finished jobs' output within the budget: the oldest go first, and a dropped job answers 404 saying it expired", async () => {
    const id = await fx.create({ ref: 'srv/busybox' }, srv);
    const print = (n: number, stream: 1 | 2 = 1) => `head -c ${n} /dev/zero | tr '\\0' a >&${stream}`;
    const done: string[] = [];
    // one after the other, so they finish in the order they started; 1000 bytes each, stdout and stderr alike
    for (const stream of [1, 2, 1] as const) {
      const j = await startJob(id, print(1000, stream));
      expect((await call('GET', `/v1/sandboxes/${id}/jobs/${j}?wait=300`)).json()).toMatchObject({ status: 'done' });
      done.push(j);
    }
    const listed = async () => ((await call('GET', `/v1/sandboxes/${id}/jobs`)).json().jobs as Array<{ job: string }>).map((j) => j.job).sort();
    // 3000 bytes: exactly the budget, all kept
    expect(await listed()).toEqual([...done].sort());
    const fourth = await startJob(id, print(1500));
    expect((await call('GET', `/v1/sandboxes/${id}/jobs/${fourth}?wait=300`)).json()).toMatchObject({ status: 'done' });
    // 4500 bytes: the two oldest go
    expect(await listed()).toEqual([done[2]!, fourth].sort());
    for (const gone of done.slice(0, 2)) {
      const r = await call('GET', `/v1/sandboxes/${id}/jobs/${gone}`);
      expect(r.status).toBe(404);
      expect(r.json().error).toMatchObject({ code: 'NOT_FOUND' });
      expect((r.json().error as { message: string }).message).toContain('expired');
    }
    // a job whose output alone is over the budget: its waiter gets the result, then it is not kept, and the others stay
    const big = await startJob(id, `while [ ! -e /tmp/go ]; do sleep 0.05; done; ${print(5000)}`);
    const waiter = call('GET', `/v1/sandboxes/${id}/jobs/${big}?wait=300`);
    expect((await call('POST', `/v1/sandboxes/${id}/exec`, { command: 'touch /tmp/go' })).json()).toMatchObject({ exit_code: 0 });
    const got = (await waiter).json() as { status: string; result: { stdout: string } };
    expect(got.status).toBe('done');
    expect(got.result.stdout).toBe('a'.repeat(5000));
    const r = await call('GET', `/v1/sandboxes/${id}/jobs/${big}`);
    expect([r.status, (r.json().error as { message: string }).message]).toEqual([404, expect.stringContaining('expired')]);
    expect(await listed()).toEqual([done[2]!, fourth].sort());
    // an id that never was is plain not found
    const never = await call('GET', `/v1/sandboxes/${id}/jobs/job-0000000000000000`);
    expect([never.status, (never.json().error as { message: string }).message]).toEqual([404, expect.not.stringContaining('expired')]);
    await call('DELETE', `/v1/sandboxes/${id}`);
  });
});
