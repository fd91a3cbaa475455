import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from '../../test/helpers/eventually.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sandbox, SandboxOptions } from './index.js';
import { leftovers, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';

const kit = busyboxSandboxEnv();
let bystander: Sandbox;

beforeAll(async () => {
  // Every attack runs beside this sandbox, which must keep working.
  bystander = await kit.create();
});
afterAll(async () => {
  await bystander.destroy();
});

async function attack(opts: Partial<SandboxOptions>, fn: (sb: Sandbox) => Promise<void>): Promise<void> {
  const sb = await kit.create(opts, { warn: () => undefined });
  const fp = await sandboxFootprint(sb);
  try {
    await fn(sb);
    expect(await bystander.exec(['sh', '-c', 'echo fine > /tmp/f && cat /tmp/f'])).toMatchObject({ status: 'ok', stdout: 'fine\n' });
  } finally {
    await sb.destroy();
  }
  expect(await leftovers(fp)).toEqual([]);
}

/** The cgroup dir that holds the sandbox's pids limit (v1 pids controller or a v2 group), if any. */
async function pidsCgroupOf(sb: Sandbox): Promise<string | null> {
  for (const d of sb.state.cgroupDirs) {
    if (
      await stat(join(d, 'pids.current')).then(
        () => true,
        () => false,
      )
    )
      return d;
  }
  return null;
}

describe('limits', () => {
  it('a fork bomb is held at the pids limit while it runs', async () => {
    await attack({ limits: { pids: 64 } }, async (sb) => {
      // The limit is read where the kernel keeps it: the sandbox's pids cgroup, sampled from the
      // host while the bomb pushes (counting /proc from inside overcounts: the glob sees pids that
      // died and were replaced while it read the directory). No clock is involved: the bomb runs
      // until the host has seen it grow and taken 200 more samples, then the command is killed.
      // The bomb keeps what it forked: a recursive `b | b &` bomb dies out once forks fail (each
      // shell that cannot fork exits), and on a busy host it could be gone before the first sample.
      const pidsDir = await pidsCgroupOf(sb);
      if (pidsDir === null) throw new Error(`no pids cgroup for a root sandbox (cgroups: ${sb.state.cgroupDirs.join(', ')})`);
      expect(Number((await readFile(join(pidsDir, 'pids.max'), 'utf8')).trim())).toBe(64);
      const bomb = new AbortController();
      const running = sb.exec(['sh', '-c', '(while :; do sleep 100000 & done) 2>/dev/null & exec sleep 100000'], { timeoutMs: 600_000, signal: bomb.signal });
      const current = async (): Promise<number> => Number((await readFile(join(pidsDir, 'pids.current'), 'utf8')).trim());
      let max = 0;
      await eventually(async () => (await current()) >= 40);
      for (let i = 0; i < 200; i++) max = Math.max(max, await current());
      bomb.abort();
      const o = await running;
      expect(o.status).toBe('killed');
      expect(max).toBeGreaterThanOrEqual(40);
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
