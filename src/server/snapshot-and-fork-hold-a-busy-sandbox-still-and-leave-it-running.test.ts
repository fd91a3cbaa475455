/**
 * Snapshot and fork of a sandbox that never rests: one loop appends to a file as fast as it can,
 * another starts a process per turn (each appending too), and a process the task stopped itself
 * waits among them. Every capture packs what it hashed (no DIGEST_MISMATCH: nothing moved while it
 * was read), the children and a sandbox made from each snapshot start, and afterwards the loops run
 * on while the process the task stopped is still stopped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerKit } from '../../test/helpers/server-kit.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const BUSY =
  "(while true; do echo x >> /root/f; done) </dev/null >/dev/null 2>&1 & (while true; do sh -c 'echo y >> /root/g'; done) </dev/null >/dev/null 2>&1 & " +
  'sleep 4242 </dev/null >/dev/null 2>&1 & echo $! > /root/stopped.pid; kill -STOP $!';

const size = async (id: string, f: string): Promise<number> => Number((await kit.sh(id, `wc -c < ${f}`)).trim());
// from the session: its processes live in a pid namespace of their own
const stoppedState = async (id: string, ses: string): Promise<string> => {
  const r = await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: 'cut -d" " -f3 /proc/$(cat /root/stopped.pid)/stat' });
  return String(r.json().stdout).trim();
};

describe('freezing a busy sandbox', () => {
  it('snapshots and forks while a writer loop and a spawning loop run, and the sandbox runs on after', async () => {
    const id = await kit.create();
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    expect((await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, { command: BUSY })).json()).toMatchObject({ exit_code: 0 });
    await eventually(async () => (await size(id, '/root/f')) > 0 && (await size(id, '/root/g')) > 0);
    expect(await stoppedState(id, ses)).toBe('T');
    const made: string[] = [];
    const snaps: string[] = [];
    try {
      for (let round = 0; round < 3; round++) {
        const s = await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, {});
        expect(s.status, s.text).toBe(201);
        snaps.push(s.json().snapshot as string);
        const f = await kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 2 });
        expect(f.status, f.text).toBe(200);
        const children = f.json().children as Array<{ id?: string; error?: unknown }>;
        expect(children.map((c) => c.error)).toEqual([undefined, undefined]);
        made.push(...children.map((c) => c.id!));
        // the task's own stop survives each thaw
        expect(await stoppedState(id, ses)).toBe('T');
      }
      // a snapshot and a fork at once share one freeze: neither thaws the sandbox under the other
      const [s, f] = await Promise.all([kit.call('POST', `/v1/sandboxes/${id}/snapshot`, {}), kit.call('POST', `/v1/sandboxes/${id}/fork`, { count: 1 })]);
      expect([s.status, f.status], `${s.text} ${f.text}`).toEqual([201, 200]);
      snaps.push(s.json().snapshot as string);
      made.push(...(f.json().children as Array<{ id: string }>).map((c) => c.id));
      expect(await stoppedState(id, ses)).toBe('T');
      for (const snapshot of snaps) made.push(await kit.create({ snapshot }));
      for (const c of made) {
        // what was captured is whole lines of what the loops wrote
        expect(await kit.sh(c, "tr -d 'x\\n' < /root/f | wc -c; tr -d 'y\\n' < /root/g | wc -c")).toBe('0\n0\n');
      }
      // the loops run on
      const [f0, g0] = [await size(id, '/root/f'), await size(id, '/root/g')];
      await eventually(async () => (await size(id, '/root/f')) > f0 && (await size(id, '/root/g')) > g0);
      expect(await stoppedState(id, ses)).toBe('T');
    } finally {
      for (const c of [id, ...made]) await kit.call('DELETE', `/v1/sandboxes/${c}`);
    }
  }, 300_000);
});
