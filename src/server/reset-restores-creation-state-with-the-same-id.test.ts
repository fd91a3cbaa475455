/**
 * POST /v1/sandboxes/:id/reset: the same sandbox id back at its creation state (or at a snapshot's):
 * what it wrote is gone, its background processes end, its sessions are closed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { ServerKit } from '../../test/helpers/server-kit.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const TREE = 'ls /data /opq /root | tr "\\n" " "';

describe('reset', () => {
  it('restores the creation state, kills a background process and closes sessions, keeping the id', async () => {
    const id = await kit.create();
    const fresh = await kit.sh(id, TREE);
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, { startup: ['cd /data'] })).json().session as string;
    const marker = sleepMarker();
    expect((await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: `sleep ${marker} >/dev/null 2>&1 &` })).status).toBe(200);
    await eventually(() => sleepRuns(marker));
    await kit.sh(id, 'rm /data/gone.txt; rm -rf /opq/*; dd if=/dev/zero of=/root/big bs=1M count=8 2>/dev/null; echo x > /root/x');
    expect(await kit.sh(id, TREE)).not.toBe(fresh);

    const r = await kit.call('POST', `/v1/sandboxes/${id}/reset`, {});
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toMatchObject({ id, ref: 'kit/busybox', sessions: [] });
    await eventually(() => !sleepRuns(marker));
    expect(await kit.sh(id, TREE)).toBe(fresh);
    expect((await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: 'true' })).status).toBe(404);
    // a session made after the reset works
    const ses2 = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    expect((await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses2}/run`, { command: 'echo $GREETING' })).json()).toMatchObject({ stdout: 'hello\n' });
    expect((await kit.call('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
  });

  it('with prewarm_reset at create, the first reset swaps in the holder started after create', async () => {
    const id = await kit.create({ prewarm_reset: true });
    const fresh = await kit.sh(id, TREE);
    // the sandbox's state file records the standby holder once it runs
    const state = (): { holderPid: number; standby?: { holderPid: number } } =>
      JSON.parse(readFileSync(join(kit.store.sandboxesDir, id, 'state.json'), 'utf8'));
    await eventually(() => state().standby !== undefined);
    const standby = state().standby!.holderPid;
    await kit.sh(id, 'echo x > /root/x && rm /data/gone.txt');

    const r = await kit.call('POST', `/v1/sandboxes/${id}/reset`, {});
    expect(r.status, r.text).toBe(200);
    expect(state().holderPid).toBe(standby);
    expect(await kit.sh(id, TREE)).toBe(fresh);
    expect((await kit.call('POST', '/v1/sandboxes', { ref: 'kit/busybox', prewarm_reset: 'yes' })).status).toBe(422);
    expect((await kit.call('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
  });

  it('resets to a snapshot, and back to the creation state after that', async () => {
    const id = await kit.create();
    const fresh = await kit.sh(id, TREE);
    await kit.sh(id, 'echo snap > /root/at-snapshot && rm /data/gone.txt');
    const snapState = await kit.sh(id, TREE);
    const snap = (await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, {})).json().snapshot as string;
    await kit.sh(id, 'echo later > /root/later && rm -rf /opq');

    const r = await kit.call('POST', `/v1/sandboxes/${id}/reset`, { snapshot: snap });
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toMatchObject({ id, snapshot: snap });
    expect(await kit.sh(id, TREE)).toBe(snapState);
    expect(await kit.sh(id, 'cat /root/at-snapshot')).toBe('snap\n');
    // writes after a reset to a snapshot go over it; another reset to it drops them again
    await kit.sh(id, 'echo again > /root/later');
    await kit.call('POST', `/v1/sandboxes/${id}/reset`, { snapshot: snap });
    expect(await kit.sh(id, TREE)).toBe(snapState);

    const back = (await kit.call('POST', `/v1/sandboxes/${id}/reset`, {})).json();
    expect(back.snapshot).toBeUndefined();
    expect(await kit.sh(id, TREE)).toBe(fresh);
    expect((await kit.call('POST', `/v1/sandboxes/${id}/reset`, { snapshot: 'snap-0000000000000000' })).status).toBe(404);
    expect((await kit.call('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
    expect((await kit.call('DELETE', `/v1/snapshots/${snap}`)).status).toBe(204);
  });
});
