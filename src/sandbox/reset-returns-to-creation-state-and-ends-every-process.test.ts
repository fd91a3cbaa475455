/**
 * reset(): the same sandbox (id, limits) back at the state it was created in, over busybox: files
 * written and deleted come back as they were, every process (a background one included) ends,
 * sessions are closed, and a disk upper's old contents are removed.
 */
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { sameProcessAlive } from './proc.js';

const kit = busyboxSandboxEnv();

describe('reset', () => {
  for (const upper of ['tmpfs', 'disk'] as const) {
    it(`puts a ${upper} sandbox back at its creation state, same id, with every process and session gone`, async () => {
      const sb = await kit.create({ upper });
      const holders = new Set<number>();
      try {
        // twice: a tmpfs sandbox's second reset swaps in the standby holder started after the first
        for (let round = 0; round < 2; round++) {
          const marker = sleepMarker();
          const s = sb.newSession();
          expect(await s.run('cd /tmp && export FOO=bar && echo written > /root/new.txt && rm /etc/group && mkdir -p /work/d')).toMatchObject({ exitCode: 0 });
          // a background process of a session lives as long as the session's shell
          expect(await sb.session().run(`sleep ${marker} >/dev/null 2>&1 &`)).toMatchObject({ exitCode: 0 });
          await eventually(() => sleepRuns(marker));
          const id = sb.id;
          const oldHolder = sb.state.holderPid;

          await sb.reset();

          expect(sb.id).toBe(id);
          expect(sb.alive).toBe(true);
          expect(sb.state.holderPid).not.toBe(oldHolder);
          await eventually(() => !sleepRuns(marker));
          expect(sb.openSessions).toEqual([]);
          // the closed session does not come back to life
          await expect(s.run('true')).rejects.toThrow();
          const o = await sb.exec(['/bin/sh', '-c', 'ls /root; cat /etc/group | head -1; ls -d /work/d 2>&1; echo "[$FOO]"; pwd']);
          expect(o.stdout).toBe('root:x:0:\nls: /work/d: No such file or directory\n[]\n/\n');
          // and it works as before
          expect(await sb.run('echo again > /root/x && cat /root/x')).toMatchObject({ exitCode: 0, stdout: 'again\n' });
          if (upper === 'disk') {
            // the old upper is removed in the background
            await eventually(() => readdirSync(`${kit.stateDir}/${id}`).every((n) => !n.startsWith('trash-')));
          }
          holders.add(oldHolder);
          holders.add(sb.state.holderPid);
          if (upper === 'tmpfs') await eventually(() => sb.state.standby !== undefined);
          if (sb.state.standby !== undefined) holders.add(sb.state.standby.holderPid);
        }
      } finally {
        await sb.destroy();
      }
      // no holder (the standby one included) outlives the sandbox
      for (const pid of holders) expect(sameProcessAlive(pid, undefined)).toBe(false);
      expect(readdirSync(kit.stateDir).filter((n) => n === sb.id)).toEqual([]);
    });
  }
});
