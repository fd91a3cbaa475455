/**
 * Async exec jobs over real HTTP and real sandboxes: started by one request, waited on and killed
 * by later ones, keeping the sandbox from the idle reaper while they run, ending with it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

describe('exec jobs', () => {
  it('runs a job after the request that started it has been answered, and answers its status, a long poll and the list', async () => {
    const id = await fx.create();
    const start = await fx.call('POST', `/v1/sandboxes/${id}/exec?async=true`, {
      command: 'while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done-$GREETING; exit 4',
    });
    expect(start.status, start.text).toBe(202);
    const { job, status } = start.json() as { job: string; status: string };
    expect(status).toBe('running');
    expect(job).toMatch(/^job-[0-9a-f]{16}$/);
    // the request is over; the job still runs (it waits for a file only a later request writes)
    const running = (await fx.call('GET', `/v1/sandboxes/${id}/jobs/${job}`)).json();
    expect(running).toMatchObject({ job, status: 'running' });
    expect(running.result).toBeUndefined();
    // a short long-poll on a job that cannot end meanwhile answers `running` once the wait is over
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/${job}?wait=0.2`)).json()).toMatchObject({ status: 'running' });
    const waiting = fx.call('GET', `/v1/sandboxes/${id}/jobs/${job}?wait=300`);
    expect((await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'touch /tmp/go' })).json()).toMatchObject({ exit_code: 0 });
    const done = (await waiting).json();
    expect(done).toMatchObject({ job, status: 'done', result: { stdout: 'done-hello\n', exit_code: 4, outcome: 'ok' } });
    expect(typeof done.started_at).toBe('string');
    const list = (await fx.call('GET', `/v1/sandboxes/${id}/jobs`)).json().jobs as Array<Record<string, unknown>>;
    expect(list).toEqual([expect.objectContaining({ job, status: 'done' })]);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('kills a running job on DELETE, keeps the sandbox from the idle reaper while a job runs, and ends jobs with their sandbox', async () => {
    const small = await fx.serve({ idleTimeoutMs: 1500 });
    const id = await fx.create({ ref: 'srv/busybox' }, small);
    const marker = sleepMarker();
    const job = (await fx.call('POST', `/v1/sandboxes/${id}/exec?async=1`, { command: `sleep ${marker}`, timeout: '30m' }, { server: small })).json()
      .job as string;
    await eventually(() => sleepRuns(marker));
    // several idle timeouts pass with no request: the running job keeps the sandbox
    await new Promise((r) => setTimeout(r, 4500));
    expect((await fx.call('GET', `/v1/sandboxes/${id}`, undefined, { server: small })).json()).toMatchObject({ id, idle_since: null });
    expect(sleepRuns(marker)).toBe(true);
    const del = await fx.call('DELETE', `/v1/sandboxes/${id}/jobs/${job}`, undefined, { server: small });
    expect(del.status, del.text).toBe(204);
    expect(sleepRuns(marker)).toBe(false);
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/${job}`, undefined, { server: small })).json()).toMatchObject({
      status: 'done',
      result: { outcome: 'killed' },
    });
    // with nothing running, the idle timeout now ends the sandbox
    await eventually(async () => (await fx.call('GET', `/v1/sandboxes/${id}`, undefined, { server: small })).status === 404);

    const id2 = await fx.create({ ref: 'srv/busybox' }, small);
    const marker2 = sleepMarker();
    const job2 = (await fx.call('POST', `/v1/sandboxes/${id2}/exec?async=true`, { command: `sleep ${marker2}` }, { server: small })).json().job as string;
    await eventually(() => sleepRuns(marker2));
    const waiter = fx.call('GET', `/v1/sandboxes/${id2}/jobs/${job2}?wait=300`, undefined, { server: small });
    expect((await fx.call('DELETE', `/v1/sandboxes/${id2}`, undefined, { server: small })).status).toBe(204);
    expect(sleepRuns(marker2)).toBe(false);
    // the waiter learns the job ended (killed with its sandbox) instead of hanging
    expect((await waiter).json()).toMatchObject({ status: 'done', result: { outcome: 'killed' } });
    expect((await fx.call('GET', `/v1/sandboxes/${id2}/jobs`, undefined, { server: small })).status).toBe(404);
  });

  it('keeps the last 64 finished jobs, and answers bad job requests with 404 and 422 naming the field', async () => {
    const id = await fx.create();
    const ids: string[] = [];
    // one after the other, so the order they finish in is the order they started in
    for (let i = 0; i < 66; i++) {
      const j = (await fx.call('POST', `/v1/sandboxes/${id}/exec?async=true`, { argv: ['true'] })).json().job as string;
      expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/${j}?wait=300`)).json()).toMatchObject({ status: 'done' });
      ids.push(j);
    }
    const kept = ((await fx.call('GET', `/v1/sandboxes/${id}/jobs`)).json().jobs as Array<{ job: string }>).map((j) => j.job);
    expect(kept).toHaveLength(64);
    expect(new Set(kept)).toEqual(new Set(ids.slice(2)));
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/${ids[0]}`)).status).toBe(404);

    const tooLong = await fx.call('GET', `/v1/sandboxes/${id}/jobs/${ids[65]}?wait=301`);
    expect([tooLong.status, tooLong.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT', field: 'wait' } }]);
    const badFlag = await fx.call('POST', `/v1/sandboxes/${id}/exec?async=yes`, { command: 'true' });
    expect([badFlag.status, badFlag.json()]).toMatchObject([422, { error: { field: 'async' } }]);
    const badBody = await fx.call('POST', `/v1/sandboxes/${id}/exec?async=true`, { command: 'true', argv: ['true'] });
    expect([badBody.status, badBody.json()]).toMatchObject([422, { error: { field: 'argv' } }]);
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/not-a-job`)).json()).toMatchObject({ error: { field: 'job' } });
    expect((await fx.call('DELETE', `/v1/sandboxes/${id}/jobs/job-0000000000000000`)).status).toBe(404);
    expect((await fx.call('POST', '/v1/sandboxes/sb-none/exec?async=true', { command: 'true' })).status).toBe(404);
    // a finished job is forgotten on DELETE
    expect((await fx.call('DELETE', `/v1/sandboxes/${id}/jobs/${ids[65]}`)).status).toBe(204);
    expect((await fx.call('GET', `/v1/sandboxes/${id}/jobs/${ids[65]}`)).status).toBe(404);
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });
});
