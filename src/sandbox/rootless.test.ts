/**
 * The same runtime run by an unprivileged user (created here, with its own subordinate range):
 * no root anywhere, no writable cgroup, so limits fall back to rlimits with a warning.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { resolveIdMap, type IdMap } from './index.js';
import type { CommandOutcome } from './outcome.js';
import { busyboxLower, REPO_ROOT } from '../../test/helpers/sandbox-testkit.js';
import { ensureTestUser, runScenarioAs } from '../../test/helpers/test-user.js';

const USER = 'msbtest';
let RANGE: IdMap;
let uid: number;
let gid: number;

beforeAll(async () => {
  ({ uid, gid } = await ensureTestUser(USER, 300_000));
  RANGE = await resolveIdMap({ user: { name: USER, uid } });
});

describe('rootless (unprivileged user)', () => {
  it('creates, isolates, limits, forks and destroys sandboxes without root', async () => {
    const lower = await busyboxLower(RANGE);
    const {
      out: printed,
      work,
      stateDir,
    } = await runScenarioAs(
      { name: USER, uid, gid },
      'msb-rootless-',
      (stateDir) => `
      import { createSandbox, forkSandbox, probeHost, listSandboxes } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      const warnings = [];
      const host = await probeHost();
      const out = { idMap: host.idMap, isRoot: host.isRoot };
      const sb = await createSandbox(
        { lowerDirs: [${JSON.stringify(lower)}], stateDir: ${JSON.stringify(stateDir)}, limits: { pids: 40, memoryBytes: 128 << 20 } },
        { host, warn: (m) => warnings.push(m) },
      );
      out.warnings = warnings;
      out.unenforced = sb.unenforced;
      out.id = await sb.exec(['sh', '-c', 'id -u; grep CapEff /proc/self/status; ls /proc | grep -c "^[0-9]"']);
      await sb.run('cd /tmp; export A=1');
      out.session = await sb.run('echo $A $(pwd)');
      out.timeout = await sb.run('sleep 20', { timeoutMs: 300 });
      out.after = await sb.run('echo $A');
      out.net = await sb.exec(['sh', '-c', 'ip -o link | cut -d: -f2']);
      await sb.writeFile('/tmp/f', 'parent');
      const [child] = await forkSandbox(sb, 1, { warn: () => {} });
      out.fork = await child.exec(['cat', '/tmp/f']);
      await child.destroy();
      // Last: RLIMIT_NPROC is per host uid, so this also starves every other sandbox of this user.
      out.bomb = await sb.exec(['sh', '-c', 'for i in $(seq 100); do sleep 5 & done 2>/dev/null; sleep 0.5; ls /proc | grep -c "^[0-9]"'], { timeoutMs: 3000 });
      await sb.destroy();
      out.left = (await listSandboxes(${JSON.stringify(stateDir)})).length;
      console.log(JSON.stringify(out));
      process.exit(0);
      `,
    );
    const out = printed as {
      isRoot: boolean;
      idMap: unknown;
      unenforced: string[];
      warnings: string[];
      left: number;
    } & Record<'id' | 'session' | 'timeout' | 'after' | 'net' | 'fork' | 'bomb', CommandOutcome>;
    expect(out.isRoot).toBe(false);
    expect(out.idMap).toEqual(RANGE);
    expect(out.unenforced).toEqual(expect.arrayContaining(['pids', 'memoryBytes']));
    expect(out.warnings.join('\n')).toMatch(/falling back to rlimits/);
    expect(out.id.stdout).toMatch(/^0\nCapEff:\s+0+\n[1-5]\n$/);
    expect(out.session.stdout).toBe('1 /tmp\n');
    expect(out.timeout.status).toBe('timeout');
    expect(out.after.stdout).toBe('1\n');
    expect(out.net.stdout.trim()).toBe('lo');
    // RLIMIT_NPROC (40) caps the processes of the sandbox user.
    expect(Number(out.bomb.stdout.trim())).toBeLessThanOrEqual(42);
    expect(out.fork, JSON.stringify(out.fork)).toMatchObject({ stdout: 'parent' });
    expect(out.left).toBe(0);
    expect(await readdir(stateDir)).toEqual([]);
    await rm(work, { recursive: true, force: true });
  });
});
