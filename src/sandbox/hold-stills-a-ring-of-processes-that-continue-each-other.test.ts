/**
 * A ring of eight processes that continue each other (SIGCONT, forever), one of them a worker
 * that counts in a file: while the sandbox is held, the count must not move. Sampled as the
 * finding did (195 of 317 samples saw the worker run under the old sweep): the freezer cgroup a
 * root sandbox gets at create, and the SIGSTOP sweep kept for sandboxes without one, each hold
 * the ring; after the thaw it runs on. A fork copies a still tree with the ring running, a reset
 * ends every member, and the task's own stopped process stays stopped through each hold.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { leftovers, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';
import { eventually } from '../../test/helpers/eventually.js';
import { cgroupHold, freezeSandbox, sweepHold } from './freeze.js';
import { forkSandboxShared, type Sandbox } from './sandbox.js';

const env = busyboxSandboxEnv();

const RING = [
  'R=/root/ring; mkdir -p $R',
  'for i in 0 1 2 3 4 5 6 7; do',
  '  ( while [ ! -f $R/go ]; do :; done; P=$(cat $R/pids); n=0',
  '    while :; do kill -CONT $P 2>/dev/null; if [ $i = 0 ]; then n=$((n+1)); echo $n > /root/tick; fi; done ) </dev/null >/dev/null 2>&1 &',
  '  echo $! >> $R/pids',
  'done',
  'sleep 4242 </dev/null >/dev/null 2>&1 & echo $! > /root/stopped.pid; kill -STOP $!',
  'touch $R/go',
].join('\n');

const tick = (sb: Sandbox): string => readFileSync(`/proc/${sb.state.holderPid}/root${sb.state.upperDir}/u/root/tick`, 'utf8');

/** Samples the worker's count while held: how many samples saw it move since the one before. */
async function samplesRan(sb: Sandbox, samples: number): Promise<number> {
  let ran = 0;
  let last = tick(sb);
  for (let i = 0; i < samples; i++) {
    await new Promise((r) => setTimeout(r, 1));
    const now = tick(sb);
    if (now !== last) ran++;
    last = now;
  }
  return ran;
}

async function startRing(sb: Sandbox): Promise<void> {
  const r = await sb.run(RING);
  expect(r.exitCode, r.stderr).toBe(0);
  await eventually(() => {
    try {
      return tick(sb) !== '' && tick(sb) !== '1\n';
    } catch {
      return false;
    }
  });
}

function processesIn(ns: string): boolean {
  return readdirSync('/proc').some((p) => {
    try {
      return /^\d+$/.test(p) && readlinkSync(`/proc/${p}/ns/user`) === ns;
    } catch {
      return false;
    }
  });
}

const stoppedState = async (sb: Sandbox): Promise<string> => (await sb.run('cut -d" " -f3 /proc/$(cat /root/stopped.pid)/stat')).stdout.trim();

describe('holding a sandbox whose processes continue each other', () => {
  it('freezes the whole ring in its cgroup, and sweeps it still without one', async () => {
    const sb = await env.create();
    try {
      expect(sb.state.freezer, 'a root sandbox has a freezer group').toBeDefined();
      await startRing(sb);
      const results: Record<string, number> = {};
      for (const [how, hold] of [
        ['cgroup', () => cgroupHold(sb.state.freezer!)],
        ['sweep', () => sweepHold(sb.state.holderPid)],
        ['freezeSandbox', () => freezeSandbox(sb.state)],
      ] as const) {
        const thaw = await hold();
        try {
          results[how] = await samplesRan(sb, 300);
        } finally {
          thaw();
        }
        // it runs on after the thaw, and the task's own stop is kept
        const before = tick(sb);
        await eventually(() => tick(sb) !== before);
        expect(await stoppedState(sb)).toBe('T');
      }
      expect(results).toEqual({ cgroup: 0, sweep: 0, freezeSandbox: 0 });
    } finally {
      await sb.destroy();
    }
  }, 120_000);

  it('forks a still copy with the ring running, and a reset ends every member', async () => {
    const sb = await env.create();
    try {
      await startRing(sb);
      const forked = await forkSandboxShared(sb, 1);
      const child = forked[0]!.ok ? forked[0]!.sandbox : undefined;
      expect(child, String(forked[0]!.ok ? '' : forked[0]!.error)).toBeDefined();
      try {
        expect((await child!.exec('cat /root/ring/pids | wc -l')).stdout.trim()).toBe('8');
      } finally {
        await child!.destroy();
      }
      const before = tick(sb);
      await eventually(() => tick(sb) !== before);
      const oldNs = readlinkSync(`/proc/${sb.state.holderPid}/ns/user`);
      await sb.reset();
      // no member survives: nothing is left in the old user namespace, and the new tree has no count
      await eventually(() => !processesIn(oldNs));
      expect((await sb.exec('ls /root')).stdout.trim()).toBe('');
    } finally {
      await sb.destroy();
    }
  }, 120_000);

  it('destroys a sandbox while it is held, leaving nothing behind (its freezer group included)', async () => {
    const sb = await env.create();
    await startRing(sb);
    const fp = await sandboxFootprint(sb);
    expect(fp.cgroups).toContain(sb.state.freezer!.dir);
    const thaw = await freezeSandbox(sb.state);
    // a frozen process dies only once thawed: destroy thaws what it kills
    await sb.destroy();
    thaw();
    expect(await leftovers(fp)).toEqual([]);
  }, 120_000);
});
