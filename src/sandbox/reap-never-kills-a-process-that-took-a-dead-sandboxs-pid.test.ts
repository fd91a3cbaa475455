/**
 * A reap (reapStaleSandboxes, teardown) kills a stale sandbox's processes by the pids its state
 * file names. pid 1 of a sandbox dies with its holder, and pids come round again fast (pid_max is
 * 32768 on these machines): a pid that named a dead sandbox's init may be anyone's by the time the
 * reap comes - another sandbox's init (a full CI run saw a server test's standby killed so), or
 * any other process of the host; and a pid 1 may outlive its holder. Only a process that is still
 * that sandbox's is killed: init by its recorded start time, or, in a state from before that was
 * recorded, while it is its live holder's child.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processStartTime, sameProcessAlive } from './proc.js';
import { type SandboxState, reapStaleSandboxes, sandboxDir, writeState } from './state.js';

const work = mkdtempSync(join(tmpdir(), 'ms-reap-pid-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A process that has ended: its pid names nobody we could hurt. */
function deadPid(): number {
  return spawnSync('true').pid ?? 0;
}

function staleState(id: string, pids: Pick<SandboxState, 'holderPid' | 'holderStartTime' | 'initPid' | 'initStartTime' | 'standby'>): SandboxState {
  const dir = sandboxDir(work, id);
  for (const d of ['upper', 'root']) mkdirSync(join(dir, d), { recursive: true });
  return {
    version: 1,
    id,
    ownerPid: deadPid(),
    lowerDirs: [],
    upperDir: join(dir, 'upper'),
    upperKind: 'tmpfs',
    mergedDir: join(dir, 'root'),
    network: 'none',
    cgroupDirs: [],
    idMap: { uidStart: 1_000_000, gidStart: 1_000_000, count: 65536 },
    createdAt: new Date().toISOString(),
    ...pids,
  };
}

describe('reaping a dead sandbox', () => {
  it('leaves alone a live process whose pid its state names as init, once its holder is gone', async () => {
    const bystander = spawn('sleep', ['600'], { stdio: 'ignore' });
    const pid = bystander.pid ?? 0;
    const start = processStartTime(pid);
    try {
      const holder = deadPid();
      // a state written before init's start time was recorded, and one whose init was another process
      writeState(work, staleState('sb-reused-init', { holderPid: holder, initPid: pid }));
      writeState(work, staleState('sb-reused-standby', { holderPid: deadPid(), initPid: 0, standby: { holderPid: holder, initPid: pid } }));
      writeState(work, staleState('sb-reused-recorded', { holderPid: holder, initPid: pid, initStartTime: '1' }));
      expect((await reapStaleSandboxes(work)).sort()).toEqual(['sb-reused-init', 'sb-reused-recorded', 'sb-reused-standby']);
      expect(sameProcessAlive(pid, start)).toBe(true);
    } finally {
      bystander.kill('SIGKILL');
    }
  });

  it('kills a pid 1 that outlived its holder, known by its start time', async () => {
    const orphan = spawn('sleep', ['600'], { stdio: 'ignore' });
    const pid = orphan.pid ?? 0;
    const start = processStartTime(pid);
    writeState(work, staleState('sb-orphan-init', { holderPid: deadPid(), initPid: pid, initStartTime: start }));
    expect(await reapStaleSandboxes(work)).toEqual(['sb-orphan-init']);
    expect(sameProcessAlive(pid, start)).toBe(false);
  });

  it("still kills a live holder's init", async () => {
    // a holder standing in: a shell whose child is the "init"
    const holder = spawn('sh', ['-c', 'sleep 600 & echo $!; wait'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const init = Number(await new Promise<string>((r) => holder.stdout.once('data', (d: Buffer) => r(d.toString().trim()))));
    const holderPid = holder.pid ?? 0;
    const holderStart = processStartTime(holderPid);
    const initStart = processStartTime(init);
    writeState(work, staleState('sb-live-holder', { holderPid, holderStartTime: holderStart, initPid: init }));
    expect(await reapStaleSandboxes(work)).toEqual(['sb-live-holder']);
    expect(sameProcessAlive(init, initStart)).toBe(false);
    expect(sameProcessAlive(holderPid, holderStart)).toBe(false);
  });
});
