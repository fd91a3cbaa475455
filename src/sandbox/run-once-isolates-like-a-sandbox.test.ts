/**
 * runOnce (the launcher's one-shot `run` mode) gives its command what createSandbox + exec give
 * one: the subordinate id map, no capabilities, no_new_privs, the seccomp filter, no nested user
 * namespaces, its own pid namespace (pid 1 its init), no host file system, the limits, timeouts and
 * exit statuses; and it leaves nothing behind, even when its caller is killed with SIGKILL.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listSandboxes, reapStaleSandboxes, runOnce, type HostInfo, type SandboxState } from './index.js';
import { busyboxLower, freshStateDir, hostInfo, REPO_ROOT } from '../../test/helpers/sandbox-testkit.js';
import { eventually } from '../../test/helpers/eventually.js';

let host: HostInfo;
let lower: string;
let stateDir: string;

beforeAll(async () => {
  host = await hostInfo();
  lower = await busyboxLower(host.idMap);
  stateDir = await freshStateDir();
});
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

/** Host processes whose command line contains `marker`. */
async function processesWith(marker: string): Promise<string[]> {
  const found: string[] = [];
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    const cmd = (await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '')).replaceAll('\0', ' ');
    if (cmd.includes(marker)) found.push(`${p}: ${cmd}`);
  }
  return found;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

describe('runOnce', () => {
  it('runs its command as the mapped root with no capabilities, seccomp and no_new_privs, under its own init', async () => {
    const marker = join('/tmp', `msb-host-only-${randomBytes(6).toString('hex')}`);
    await writeFile(marker, 'host');
    let state: SandboxState | undefined;
    try {
      const o = await runOnce(
        { lowerDirs: [lower], stateDir },
        [
          '/bin/sh',
          '-c',
          [
            'cat /proc/self/uid_map',
            "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
            'echo pid=$$',
            "echo cmdline=$(tr -d '\\0' < /proc/1/cmdline | wc -c)",
            'ls /proc/1/fd >/dev/null 2>&1; echo fd1=$?',
            'unshare -U true 2>/dev/null; echo userns=$?',
            'mount -t tmpfs x /mnt 2>/dev/null; echo mount=$?',
            `test -e ${marker}; echo marker=$?`,
            'ls /proc | grep -c "^[0-9]"',
          ].join('\n'),
        ],
        {},
        { host, onCreated: (s) => void (state = s) },
      );
      expect(o.status, JSON.stringify(o)).toBe('ok');
      const lines = o.stdout.trim().split('\n');
      expect(lines[0]!.trim().split(/\s+/)).toEqual(['0', String(host.idMap.uidStart), String(host.idMap.count)]);
      expect(o.stdout).toMatch(/^CapEff:\s+0+$/m);
      expect(o.stdout).toMatch(/^CapPrm:\s+0+$/m);
      expect(o.stdout).toMatch(/^CapBnd:\s+0+$/m);
      expect(o.stdout).toMatch(/^NoNewPrivs:\s+1$/m);
      expect(o.stdout).toMatch(/^Seccomp:\s+2$/m);
      // pid 2 under an init that shows neither its command line (host paths) nor its fds
      expect(o.stdout).toMatch(/^pid=2$/m);
      expect(o.stdout).toMatch(/^cmdline=0$/m);
      expect(o.stdout).toMatch(/^fd1=[1-9]/m);
      expect(o.stdout).toMatch(/^userns=[1-9]/m);
      expect(o.stdout).toMatch(/^mount=[1-9]/m);
      expect(o.stdout).toMatch(/^marker=1$/m);
      // init, the shell, and ls (plus grep): nothing of the host
      expect(Number(lines.at(-1))).toBeLessThanOrEqual(4);
    } finally {
      await rm(marker, { force: true });
    }
    // gone: its dir, its cgroup
    expect(state).toBeDefined();
    expect(await exists(join(stateDir, state!.id))).toBe(false);
    for (const d of state!.cgroupDirs) expect(await exists(d)).toBe(false);
  });

  it('reports exit codes as exec does: the command own, a signal, not found 127, not runnable 126', async () => {
    const run = (argv: string[]) => runOnce({ lowerDirs: [lower], stateDir }, argv, {}, { host });
    expect(await run(['/bin/sh', '-c', 'echo out; echo err >&2; exit 7'])).toMatchObject({ status: 'ok', exitCode: 7, stdout: 'out\n', stderr: 'err\n' });
    expect(await run(['/bin/sh', '-c', 'kill -9 $$'])).toMatchObject({ status: 'killed', exitCode: 137, signal: 'SIGKILL' });
    const missing = await run(['no-such-program']);
    expect(missing).toMatchObject({ status: 'infra_error', exitCode: 127 });
    expect(missing.stderr).toMatch(/cannot run no-such-program/);
    expect(await run(['/etc/passwd'])).toMatchObject({ status: 'infra_error', exitCode: 126 });
    const input = await runOnce({ lowerDirs: [lower], stateDir }, ['cat'], { stdin: 'given input' }, { host });
    expect(input).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'given input' });
    const env = await runOnce(
      { lowerDirs: [lower], stateDir, config: { env: { A: 'from-config' } } },
      ['/bin/sh', '-c', 'echo "$A $B $(pwd) $(id -u)"'],
      { env: { B: 'from-run' }, workdir: '/work/here', user: { uid: 1000, gid: 1000 } },
      { host },
    );
    expect(env).toMatchObject({ status: 'ok', stdout: 'from-config from-run /work/here 1000\n' });
  });

  it('holds the pids limit during a fork loop, and a timeout ends the whole tree', async () => {
    const bomb = await runOnce(
      { lowerDirs: [lower], stateDir, limits: { pids: 20 } },
      ['/bin/sh', '-c', 'for i in $(seq 60); do sleep 5 & done 2>/dev/null; sleep 0.3; ls /proc | grep -c "^[0-9]"'],
      { timeoutMs: 60_000 },
      { host },
    );
    expect(bomb.status, JSON.stringify(bomb)).toBe('ok');
    expect(Number(bomb.stdout.trim())).toBeLessThanOrEqual(21);
    const marker = String(900_000 + Math.floor(Math.random() * 99_999));
    const t = await runOnce({ lowerDirs: [lower], stateDir }, ['/bin/sh', '-c', `sleep ${marker} & sleep ${marker}`], { timeoutMs: 500 }, { host });
    expect(t).toMatchObject({ status: 'timeout', exitCode: null });
    expect(await processesWith(`sleep ${marker}`)).toEqual([]);
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 300);
    const k = await runOnce({ lowerDirs: [lower], stateDir }, ['/bin/sh', '-c', `sleep ${marker} & sleep ${marker}`], { signal: abort.signal }, { host });
    expect(k).toMatchObject({ status: 'killed', signal: 'SIGKILL' });
    expect(await processesWith(`sleep ${marker}`)).toEqual([]);
    expect((await listSandboxes(stateDir)).length).toBe(0);
  });

  it('a memory bomb ends as oom', async () => {
    const o = await runOnce(
      { lowerDirs: [lower], stateDir, limits: { memoryBytes: 64 << 20 } },
      ['sh', '-c', 'x=$(head -c 400000000 /dev/zero | tr "\\0" a); echo ${#x}'],
      { timeoutMs: 60_000 },
      { host },
    );
    expect(o).toMatchObject({ status: 'oom', signal: 'SIGKILL' });
  });

  it('a caller killed with SIGKILL takes its command along and leaves a state the next reap removes', async () => {
    const own = await freshStateDir();
    const marker = String(800_000 + Math.floor(Math.random() * 99_999));
    const script = join(own, 'caller.mts');
    await writeFile(
      script,
      `import { runOnce } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      await runOnce({ lowerDirs: [${JSON.stringify(lower)}], stateDir: ${JSON.stringify(own)} },
        ['/bin/sh', '-c', 'echo started; sleep ${marker}'], { stdio: 'inherit' });`,
    );
    try {
      // node itself (the tsx command would be a parent of the process that runs the script)
      const caller = spawn(process.execPath, ['--import', 'tsx', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve, reject) => {
        caller.stdout.on('data', (c: Buffer) => {
          if (c.toString().includes('started')) resolve();
        });
        caller.on('exit', (code) => reject(new Error(`the caller exited (${code}) before its command started`)));
      });
      expect(await processesWith(`sleep ${marker}`)).not.toEqual([]);
      caller.kill('SIGKILL');
      // the launcher dies with its parent, and the sandbox with it
      await eventually(async () => (await processesWith(`sleep ${marker}`)).length === 0);
      const left = await listSandboxes(own);
      expect(left.map((e) => e.live)).toEqual([false]);
      const { cgroupDirs } = left[0]!.state!;
      expect(await reapStaleSandboxes(own)).toEqual([left[0]!.id]);
      expect((await readdir(own)).filter((n) => n !== 'caller.mts')).toEqual([]);
      for (const d of cgroupDirs) expect(await exists(d)).toBe(false);
    } finally {
      await rm(own, { recursive: true, force: true });
    }
  });
});
