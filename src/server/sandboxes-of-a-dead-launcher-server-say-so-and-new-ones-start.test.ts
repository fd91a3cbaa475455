/**
 * If the launcher server dies anyway (a bug, the OOM killer), the sandboxes it held die with it:
 * their holders end with it (PR_SET_PDEATHSIG), which keeps a sandbox from outliving its runtime.
 * The server then says so for each, 410 SANDBOX_DESTROYED naming the launcher server (not a 404
 * as if its TTL had passed), also once it has been reaped; and the next create gets a new
 * launcher server and runs. Real HTTP, real sandboxes, a real SIGKILL.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerFixture } from '../../test/helpers/server-fixture.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

/** This process's `sandbox-launch serve` children. */
function launcherServers(): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
        return cmd[1] === 'serve' && /sandbox-launch/.test(cmd[0] ?? '') && readFileSync(`/proc/${p}/status`, 'utf8').includes(`\nPPid:\t${process.pid}\n`);
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe('a launcher server that died', () => {
  it('takes its sandboxes with it, which then say why, and the next create starts a new one', async () => {
    const ids = [await fx.create(), await fx.create()];
    const [server, ...more] = launcherServers();
    expect(more).toEqual([]);
    process.kill(server!, 'SIGKILL');
    for (const id of ids) {
      let r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'true' });
      await eventually(async () => {
        r = await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command: 'true' });
        return r.status !== 200;
      });
      expect(r.status, r.text).toBe(410);
      expect(r.json().error).toMatchObject({ code: 'SANDBOX_DESTROYED' });
      expect((r.json().error as { message: string }).message).toMatch(new RegExp(`sandbox ${id} ended: the launcher server holding it exited`));
    }
    // reaped (gone from the list), and still told why
    await eventually(async () => ((await fx.call('GET', '/v1/sandboxes')).json().sandboxes as unknown[]).length === 0);
    expect((await fx.call('GET', `/v1/sandboxes/${ids[0]}`)).status).toBe(410);

    const fresh = await fx.create();
    expect((await fx.call('POST', `/v1/sandboxes/${fresh}/exec`, { command: 'echo new' })).json()).toMatchObject({ outcome: 'ok', stdout: 'new\n' });
    expect(launcherServers()).not.toContain(server);
  });
});
