/**
 * runOnce run by an unprivileged user (created here, with its own subordinate range): newuidmap
 * writes the id map, no cgroup is writable, so pids fall back to RLIMIT_NPROC, which the launcher
 * sets inside the sandbox's user namespace (counting the sandbox's processes only).
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

describe('runOnce, rootless', () => {
  it('maps the subordinate range, drops every capability, limits pids by rlimit, times out and leaves nothing', async () => {
    const lower = await busyboxLower(RANGE);
    const {
      out: printed,
      work,
      stateDir,
    } = await runScenarioAs(
      { name: USER, uid, gid },
      'msb-rootless-once-',
      (stateDir) => `
      import { runOnce, probeHost, listSandboxes } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      const host = await probeHost();
      const warnings = [];
      const base = { lowerDirs: [${JSON.stringify(lower)}], stateDir: ${JSON.stringify(stateDir)} };
      const hooks = { host, warn: (m) => warnings.push(m) };
      const out = { isRoot: host.isRoot };
      out.id = await runOnce(base, ['sh', '-c', 'cat /proc/self/uid_map; grep CapEff /proc/self/status; echo $$'], {}, hooks);
      out.bomb = await runOnce({ ...base, limits: { pids: 20 } },
        ['sh', '-c', 'for i in $(seq 60); do sleep 5 & done 2>/dev/null; sleep 0.3; ls /proc | grep -c "^[0-9]"'], { timeoutMs: 60_000 }, hooks);
      out.timeout = await runOnce(base, ['sleep', '100'], { timeoutMs: 300 }, hooks);
      out.warnings = warnings;
      out.left = (await listSandboxes(${JSON.stringify(stateDir)})).length;
      console.log(JSON.stringify(out));
      process.exit(0);
      `,
    );
    const out = printed as {
      isRoot: boolean;
      warnings: string[];
      left: number;
    } & Record<'id' | 'bomb' | 'timeout', CommandOutcome>;
    expect(out.isRoot).toBe(false);
    expect(out.id.status, JSON.stringify(out.id)).toBe('ok');
    const [map, caps, pid] = out.id.stdout.trim().split('\n');
    expect(map!.trim().split(/\s+/)).toEqual(['0', String(RANGE.uidStart), String(RANGE.count)]);
    expect(caps).toMatch(/^CapEff:\s+0+$/);
    expect(pid).toBe('2');
    expect(out.warnings.join('\n')).toMatch(/falling back to rlimits/);
    expect(out.bomb.status, JSON.stringify(out.bomb)).toBe('ok');
    // RLIMIT_NPROC (20) caps the processes of the sandbox's root; init counts too
    expect(Number(out.bomb.stdout.trim())).toBeLessThanOrEqual(22);
    expect(out.timeout.status).toBe('timeout');
    expect(out.left).toBe(0);
    expect(await readdir(stateDir)).toEqual([]);
    await rm(work, { recursive: true, force: true });
  });
});
