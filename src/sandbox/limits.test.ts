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
  it('a fork bomb is stopped by the pids limit and ends at the timeout', async () => {
    await attack({ limits: { pids: 64 } }, async (sb) => {
      const o = await sb.exec(['sh', '-c', 'b() { b | b & }; b; sleep 2; echo survived'], { timeoutMs: 4000 });
      expect(['ok', 'timeout']).toContain(o.status);
      const count = await sb.exec(['sh', '-c', 'ls /proc | grep -c "^[0-9]"']);
      expect(Number(count.stdout)).toBeLessThanOrEqual(64);
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

  it('cpu limit: a busy loop gets about its quota of CPU time', async () => {
    await attack({ limits: { cpus: 0.2 } }, async (sb) => {
      const o = await sb.exec(['sh', '-c', 'i=0; end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do i=$((i+1)); done; cat /proc/self/stat >/dev/null; times'], { timeoutMs: 10_000 });
      expect(o.status).toBe('ok');
      if (sb.unenforced.includes('cpus')) return; // no writable cpu controller: rlimits cannot do this
      // `times` prints user/system time of the shell's children and itself: well under the 2 s wall.
      const secs = [...o.stdout.matchAll(/(\d+)m([\d.]+)s/g)].reduce((t, m) => t + Number(m[1]) * 60 + Number(m[2]), 0);
      expect(secs).toBeLessThan(1.2);
    });
  });
});
