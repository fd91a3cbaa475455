/**
 * prewarmReset: a tmpfs sandbox opened with it starts the holder its first reset swaps in right
 * after create (a standby holder over its creation layers, recorded in its state), so the first
 * reset starts none; the reset still puts it back at its creation state, and no holder outlives it.
 */
import { describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { sameProcessAlive } from './proc.js';

const kit = busyboxSandboxEnv();

describe('prewarmReset', () => {
  it('has the first reset swap in a holder started after create', async () => {
    const sb = await kit.create({ prewarmReset: true });
    const holders: number[] = [];
    try {
      await eventually(() => sb.state.standby !== undefined);
      const standby = sb.state.standby!.holderPid;
      holders.push(sb.state.holderPid, standby);
      expect(await sb.run('echo written > /root/new.txt && rm /etc/group')).toMatchObject({ exitCode: 0 });

      await sb.reset();

      // the prewarmed holder is the sandbox's holder now: the first reset started none
      expect(sb.state.holderPid).toBe(standby);
      const o = await sb.exec(['/bin/sh', '-c', 'ls /root; head -1 /etc/group']);
      expect(o.stdout).toBe('root:x:0:\n');
      // and the next standby is prepared as after any reset
      await eventually(() => sb.state.standby !== undefined);
      holders.push(sb.state.standby!.holderPid);
    } finally {
      await sb.destroy();
    }
    for (const pid of holders) expect(sameProcessAlive(pid, undefined)).toBe(false);
  });

  it('is off by default: a sandbox that was never reset holds one holder', async () => {
    const pre = await kit.create({ prewarmReset: true });
    const plain = await kit.create();
    try {
      // once the prewarmed one's standby is up, the plain one (created after it) has had as long
      await eventually(() => pre.state.standby !== undefined);
      expect(await plain.run('true')).toMatchObject({ exitCode: 0 });
      expect(plain.state.standby).toBeUndefined();
    } finally {
      await Promise.all([pre.destroy(), plain.destroy()]);
    }
  });
});
