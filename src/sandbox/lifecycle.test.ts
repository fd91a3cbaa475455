import { spawn } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { listSandboxes, reapStaleSandboxes, CommandOutcomeSchema } from './index.js';
import { leftovers, REPO_ROOT, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';

const kit = busyboxSandboxEnv();

describe('sandbox lifecycle', () => {
  it('creates, runs a command with the config env/workdir/hostname, and destroys leaving nothing behind', async () => {
    const sb = await kit.create({ config: { workdir: '/work/proj', env: { GREETING: 'hi there' }, hostname: 'task-1' } });
    const fp = await sandboxFootprint(sb);
    const o = await sb.exec(['sh', '-c', 'echo "$GREETING"; pwd; hostname; id -u; echo oops >&2; exit 7']);
    expect(CommandOutcomeSchema.parse(o)).toMatchObject({
      status: 'ok',
      exitCode: 7,
      signal: null,
      stdout: 'hi there\n/work/proj\ntask-1\n0\n',
      stderr: 'oops\n',
    });
    const env = await sb.exec('env');
    expect(env.stdout).not.toContain('VITEST'); // host environment does not leak in
    expect((await listSandboxes(kit.stateDir)).find((l) => l.id === sb.id)?.live).toBe(true);
    await sb.destroy();
    await sb.destroy(); // idempotent
    expect(await leftovers(fp)).toEqual([]);
    expect((await listSandboxes(kit.stateDir)).map((l) => l.id)).not.toContain(sb.id);
    await expect(sb.exec('true')).rejects.toThrow(/destroyed/);
  });

  it('reports a command that cannot start as infra_error, not as the command failing', async () => {
    const sb = await kit.create();
    try {
      const o = await sb.exec(['/no/such/binary']);
      expect(o.status).toBe('infra_error');
      const bad = await sb.exec('true', { workdir: '/does/not/exist' });
      expect(bad.status).toBe('infra_error');
      expect(bad.error).toMatch(/cannot enter workdir/);
      // An argument the wire cannot carry is refused up front, and the sandbox stays usable.
      await expect(sb.exec(['echo', 'a\0b'])).rejects.toThrow(/NUL byte/);
      expect((await sb.exec(['echo', 'still'])).stdout).toBe('still\n');
    } finally {
      await sb.destroy();
    }
  });

  it('stateless exec runs beside a busy session', async () => {
    const sb = await kit.create();
    try {
      // the session's command ends only once the exec has run: an exec that waited for the
      // session would never return (the test's timeout then fails it), however slow the machine
      const long = sb.run('while [ ! -e /tmp/go ]; do sleep 0.05; done; echo session-done');
      const quick = await sb.exec(['echo', 'exec-done']);
      expect(quick.stdout).toBe('exec-done\n');
      expect((await sb.exec(['touch', '/tmp/go'])).exitCode).toBe(0);
      expect((await long).stdout).toBe('session-done\n');
    } finally {
      await sb.destroy();
    }
  });

  it('destroys the whole sandbox when its lifetime passes', async () => {
    const sb = await kit.create({ timeoutMs: 400 });
    const fp = await sandboxFootprint(sb);
    const o = await sb.exec(['sleep', '30']);
    expect(o.status).toBe('killed');
    expect(sb.alive).toBe(false);
    await sb.destroy();
    expect(await leftovers(fp)).toEqual([]);
  });

  it('a disk upper dir holds the writes on the host disk and is removed on destroy', async () => {
    const sb = await kit.create({ upper: 'disk' });
    const fp = await sandboxFootprint(sb);
    await sb.exec(['sh', '-c', 'echo on-disk > /root/f']);
    expect(await readFile(join(sb.state.upperDir, 'u/root/f'), 'utf8')).toBe('on-disk\n');
    await sb.destroy();
    expect(await leftovers(fp)).toEqual([]);
  });

  it('a volatile disk upper (builds) is mounted without syncs and still holds every write', async () => {
    const sb = await kit.create({ upper: 'disk', volatileUpper: true });
    const fp = await sandboxFootprint(sb);
    const mounts = await readFile(`/proc/${sb.state.holderPid}/mountinfo`, 'utf8');
    const root = mounts.split('\n').find((l) => l.split(' ')[4] === sb.state.mergedDir);
    expect(root).toMatch(/ overlay msb-root .*volatile/);
    const o = await sb.exec(['sh', '-c', 'echo synced > /root/f && sync && sync /root/f && echo ok']);
    expect(o.stdout).toBe('ok\n');
    expect(await readFile(join(sb.state.upperDir, 'u/root/f'), 'utf8')).toBe('synced\n');
    await sb.destroy();
    expect(await leftovers(fp)).toEqual([]);
  });

  it('a runtime exits by itself once its sandboxes are destroyed (the launcher server keeps it alive only while needed)', async () => {
    const script = `
      import { createSandbox, probeHost } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      const host = await probeHost();
      const sb = await createSandbox({ lowerDirs: [${JSON.stringify(kit.lower)}], stateDir: ${JSON.stringify(kit.stateDir)} }, { host });
      const o = await sb.exec(['echo', 'ran']);
      await sb.destroy();
      process.stdout.write(o.stdout);
    `;
    const child = spawn('npx', ['tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 280_000); // a safety net below the test's timeout: npx tsx alone takes seconds on a busy host
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(out).toBe('ran\n');
    expect(code).toBe(0);
  });

  it('a sandbox that cannot start says why, and the next one starts', async () => {
    await expect(kit.create({ lowerDirs: ['/nonexistent/msb-layer'] })).rejects.toThrow(/overlay.*msb-upper|mount overlay|No such file/);
    const sb = await kit.create();
    expect((await sb.exec(['true'])).status).toBe('ok');
    const fp = await sandboxFootprint(sb);
    await sb.destroy();
    expect(await leftovers(fp)).toEqual([]);
  });

  it('reaps the sandboxes of a runtime that died without cleaning up', async () => {
    // A separate runtime process creates a sandbox with a background process, then is SIGKILLed.
    const script = `
      import { createSandbox, probeHost } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      const host = await probeHost();
      const sb = await createSandbox({ lowerDirs: [${JSON.stringify(kit.lower)}], stateDir: ${JSON.stringify(kit.stateDir)}, limits: { pids: 50 } }, { host });
      await sb.run('sleep 1000 &');
      console.log(JSON.stringify(sb.state));
      setInterval(() => {}, 1000);
    `;
    const child = spawn('npx', ['tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve) => {
      let buf = '';
      child.stdout.on('data', (c: Buffer) => {
        buf += c.toString();
        if (buf.includes('\n')) resolve(buf.split('\n')[0]!);
      });
    });
    const state = JSON.parse(line) as { id: string; ownerPid: number; holderPid: number; initPid: number; upperDir: string; cgroupDirs: string[] };
    expect(await readFile(`/proc/${state.initPid}/stat`, 'utf8')).toBeTruthy();
    // The runtime dies without any chance to clean up ...
    process.kill(state.ownerPid, 'SIGKILL');
    child.kill('SIGKILL');
    // ... and its sandboxes' processes end by themselves (the launcher server and every holder
    // die with their parent), before any reaping.
    const alive = async (pid: number): Promise<boolean> => !(await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ') Z ')).includes(') Z ');
    await eventually(async () => !(await alive(state.holderPid)) && !(await alive(state.initPid)));
    expect(await alive(state.holderPid)).toBe(false);
    expect(await alive(state.initPid)).toBe(false);
    const before = await listSandboxes(kit.stateDir);
    expect(before.find((l) => l.id === state.id)?.live).toBe(false);
    const reaped = await reapStaleSandboxes(kit.stateDir);
    expect(reaped).toContain(state.id);
    for (const pid of [state.holderPid, state.initPid]) {
      // Gone, or a zombie waiting for the host's init to reap it.
      expect(await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ') Z ')).toContain(') Z ');
    }
    await expect(stat(join(kit.stateDir, state.id))).rejects.toThrow();
    for (const d of state.cgroupDirs) await expect(stat(d)).rejects.toThrow();
  });
});
