import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, type HostInfo, type Sandbox, type SandboxOptions } from './index.js';
import { busyboxLower, freshStateDir, hostInfo, leftovers, sandboxFootprint } from './testkit.js';

let host: HostInfo;
let lower: string;
let stateDir: string;
let bystander: Sandbox;

beforeAll(async () => {
  host = await hostInfo();
  lower = await busyboxLower(host.idMap);
  stateDir = await freshStateDir();
  // Every attack runs beside this sandbox, which must keep working.
  bystander = await createSandbox({ lowerDirs: [lower], stateDir }, { host });
});
afterAll(async () => {
  await bystander.destroy();
  await rm(stateDir, { recursive: true, force: true });
});

async function attack(opts: Partial<SandboxOptions>, fn: (sb: Sandbox) => Promise<void>): Promise<void> {
  const sb = await createSandbox({ lowerDirs: [lower], stateDir, ...opts }, { host, warn: () => undefined });
  const fp = await sandboxFootprint(sb);
  try {
    await fn(sb);
    expect(await bystander.exec(['sh', '-c', 'echo fine > /tmp/f && cat /tmp/f'])).toMatchObject({ status: 'ok', stdout: 'fine\n' });
  } finally {
    await sb.destroy();
  }
  expect(await leftovers(fp)).toEqual([]);
}

describe('limits', () => {
  it('a fork bomb is held at the pids limit while it runs', async () => {
    await attack({ limits: { pids: 64 } }, async (sb) => {
      // The bomb runs in the background while this shell counts the processes of the command's
      // pid namespace with builtins only (a fork may fail under the limit): first until the bomb
      // has clearly grown, then 200 more counts while it keeps pushing. No clock is involved: a
      // slow machine only takes longer (a bomb that never grows is caught by the test's timeout).
      const script = [
        'b() { b | b & }; b &',
        'count() { n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; }',
        'max=0; count; until [ $n -ge 40 ]; do count; done',
        'i=0; while [ $i -lt 200 ]; do count; [ $n -gt $max ] && max=$n; i=$((i+1)); done',
        'echo "max=$max"; kill -9 -1',
      ].join('\n');
      const o = await sb.exec(['sh', '-c', script], { timeoutMs: 240_000 });
      const max = Number(/max=(\d+)/.exec(o.stdout)?.[1]);
      expect(max, o.stderr.slice(-400)).toBeGreaterThanOrEqual(40);
      expect(max).toBeLessThanOrEqual(64);
      // the bomb ended with its command; the sandbox takes commands again
      expect((await sb.exec(['echo', 'after'])).stdout).toBe('after\n');
    });
  });

  it('a memory bomb ends as oom', async () => {
    await attack({ limits: { memoryBytes: 64 << 20 } }, async (sb) => {
      const o = await sb.exec(['sh', '-c', 'x=$(head -c 400000000 /dev/zero | tr "\\0" a); echo ${#x}'], { timeoutMs: 30_000 });
      expect(o.status).toBe('oom');
      expect(o.signal).toBe('SIGKILL');
      const s = await sb.run('x=$(head -c 400000000 /dev/zero | tr "\\0" a); echo ${#x}', { timeoutMs: 30_000 });
      expect(s.status).toBe('oom');
      expect((await sb.exec(['echo', 'after'])).stdout).toBe('after\n');
    });
  });

  it('filling the disk gives ENOSPC inside the sandbox only', async () => {
    await attack({ limits: { diskBytes: 8 << 20 } }, async (sb) => {
      const o = await sb.exec(['sh', '-c', 'dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?']);
      expect(o.stdout).toMatch(/No space left/);
      expect(o.stdout).toMatch(/rc=[1-9]/);
      const df = await sb.exec(['sh', '-c', 'rm /tmp/fill && echo ok > /tmp/after && cat /tmp/after']);
      expect(df.stdout).toBe('ok\n');
    });
  });

  it('cpu limit: a busy loop gets at most its quota of CPU time', async (ctx) => {
    await attack({ limits: { cpus: 0.2 } }, async (sb) => {
      if (sb.unenforced.includes('cpus')) {
        ctx.skip('not enforced on this host: no writable cpu cgroup controller for sandboxes, and rlimits cannot limit CPU share');
      }
      // A shell loop (builtins only) spins until it has used 0.5 s of CPU (utime + stime of
      // /proc/self/stat, in 1/100 s). At 0.2 cores that takes at least 2.5 s of wall time; the
      // bound below leaves a fifth for period boundaries. A busy machine only makes it longer, so
      // the assertion holds under any load, and fails where the quota is not applied on a machine
      // with a core to spare.
      const script = [
        'while :; do',
        '  i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done',
        '  read -r line < /proc/self/stat; set -- $line',
        '  [ $(( ${14} + ${15} )) -ge 50 ] && break',
        'done; echo spun',
      ].join('\n');
      const o = await sb.exec(['sh', '-c', script], { timeoutMs: 240_000 });
      expect(o).toMatchObject({ status: 'ok', stdout: 'spun\n' });
      expect(o.durationMs).toBeGreaterThanOrEqual(0.8 * (0.5 / 0.2) * 1000);
    });
  });
});
