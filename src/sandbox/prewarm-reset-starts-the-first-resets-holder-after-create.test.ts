/**
 * prewarmReset: a tmpfs sandbox opened with it starts the holder its first reset swaps in right
 * after create (a standby holder over its creation layers, recorded in its state), so the first
 * reset starts none; the reset still puts it back at its creation state, and no holder outlives it.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { busyboxLower, freshStateDir, hostInfo } from '../../test/helpers/sandbox-testkit.js';
import { createSandbox, type HostInfo } from './index.js';
import { sameProcessAlive } from './proc.js';

let host: HostInfo;
let lower: string;
let stateDir: string;

beforeAll(async () => {
  host = await hostInfo();
  lower = await busyboxLower(host.idMap);
  stateDir = await freshStateDir();
}, 300_000);
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

describe('prewarmReset', () => {
  it('has the first reset swap in a holder started after create', async () => {
    const sb = await createSandbox({ lowerDirs: [lower], stateDir, prewarmReset: true }, { host });
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
    const pre = await createSandbox({ lowerDirs: [lower], stateDir, prewarmReset: true }, { host });
    const plain = await createSandbox({ lowerDirs: [lower], stateDir }, { host });
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
