/**
 * `minisandbox run` hands its prepared sandbox to the launcher by exec (sandbox/run-in-place.ts):
 * while the command runs, the CLI's process is the launcher, not a node runtime; it ends the run
 * with the exit codes and messages the library's outcome gives (`--json` still takes that path),
 * and tears the sandbox down, or leaves it to the next reap when it is killed itself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { CLI, type Ran, runCli } from '../../test/helpers/run-cli.js';
import { sleepMarker, sleepRuns, stateOf, statesOf } from '../../test/helpers/sleep-marker.js';

const TAG = 'inplace/busybox';
const { work } = publishedBusybox('ms-run-in-place-', TAG);
const registry = join(work, 'registry');

function storeOf(name: string): string {
  return join(work, name);
}

function run(store: string, args: string[]): Promise<Ran> {
  return runCli(['--registry', registry, '--store', store, ...args]);
}

/** `run` in the background, with its stdout collected. */
function start(store: string, args: string[]): { child: ChildProcess; stdout: () => string; ended: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn(CLI, ['--registry', registry, '--store', store, 'run', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const ended = new Promise<{ code: number | null; stderr: string }>((done) => child.on('close', (code) => done({ code, stderr: err })));
  return { child, stdout: () => out, ended };
}

function entries(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** What a sandbox of this store holds on the host: its state dir, lease, cgroups, id range slot. */
interface Footprint {
  id: string;
  cgroupDirs: string[];
  idSlot: string | undefined;
}

function footprintOf(store: string): Footprint {
  const [id = 'missing'] = entries(join(store, 'sandboxes'));
  const state = JSON.parse(readFileSync(join(store, 'sandboxes', id, 'state.json'), 'utf8')) as { cgroupDirs: string[]; idSlot?: string };
  return { id, cgroupDirs: state.cgroupDirs, idSlot: state.idSlot };
}

function expectGone(store: string, f: Footprint): void {
  expect(entries(join(store, 'sandboxes'))).toEqual([]);
  expect(entries(join(store, 'leases'))).toEqual([]);
  for (const d of f.cgroupDirs) expect(existsSync(d), d).toBe(false);
  // the range may be another sandbox's by now (test files run at once): only not this one's
  if (f.idSlot !== undefined && existsSync(f.idSlot)) expect(readFileSync(f.idSlot, 'utf8')).not.toContain(f.id);
}

describe('minisandbox run, in place', () => {
  it('is the launcher while the command runs, holding a few MB instead of a node runtime, and leaves nothing behind', async () => {
    const store = storeOf('store-run');
    const r = start(store, [TAG, '--', 'sh', '-c', 'echo started; read line; echo "got $line"']);
    await eventually(() => r.stdout() === 'started\n');
    const pid = r.child.pid ?? 0;
    // the shell script bin/minisandbox execs node, which execs the launcher: one pid all along
    expect(readlinkSync(`/proc/${pid}/exe`)).toMatch(/\/sandbox-launch-[0-9a-f]+$/);
    const rssKb = Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    expect(rssKb).toBeLessThan(16 * 1024);
    const f = footprintOf(store);
    expect(entries(join(store, 'leases'))).toEqual([`${f.id}.json`]);
    r.child.stdin?.end('hello\n');
    const end = await r.ended;
    expect(end.code, end.stderr).toBe(0);
    expect(r.stdout()).toBe('started\ngot hello\n');
    expect(end.stderr).toBe('');
    expectGone(store, f);
  });

  it('exits with the codes the library outcome gives through --json, and says how a command it did not end by itself ended', async () => {
    const store = storeOf('store-codes');
    const cases: Array<{ argv: string[]; code: number; says?: string }> = [
      { argv: ['sh', '-c', 'exit 3'], code: 3 },
      { argv: ['sh', '-c', 'kill -TERM $$'], code: 143, says: 'command ended: killed' },
      { argv: ['sh', '-c', 'kill -SYS $$'], code: 159, says: 'command ended: killed' },
      { argv: ['no-such-program'], code: 127 },
      { argv: ['/etc/passwd'], code: 126 },
    ];
    for (const c of cases) {
      const inPlace = await run(store, ['run', TAG, '--', ...c.argv]);
      const json = await run(store, ['--json', 'run', TAG, '--', ...c.argv]);
      expect(inPlace.code, `${c.argv.join(' ')}: ${inPlace.stderr}`).toBe(c.code);
      expect(json.code, `${c.argv.join(' ')} --json: ${json.stderr}`).toBe(c.code);
      if (c.says !== undefined) expect(inPlace.stderr).toContain(`warning: ${c.says}`);
      else expect(inPlace.stderr).not.toContain('command ended');
    }
    expect(entries(join(store, 'sandboxes'))).toEqual([]);
    expect(entries(join(store, 'leases'))).toEqual([]);
  });

  it('ends a command at --timeout with 124 and tears its sandbox down', async () => {
    const store = storeOf('store-timeout');
    const marker = sleepMarker();
    // nothing is looked at while it runs: how much of the second the start takes is the machine's business
    const end = await start(store, ['--timeout', '1s', TAG, '--', 'sleep', marker]).ended;
    expect(end.code).toBe(124);
    expect(end.stderr).toContain('warning: command ended: timeout');
    expect(sleepRuns(marker)).toBe(false);
    expect(entries(join(store, 'sandboxes'))).toEqual([]);
    expect(entries(join(store, 'leases'))).toEqual([]);
  });

  it('ends as oom, 137, when the command outgrows --memory', async () => {
    const r = await run(storeOf('store-oom'), ['run', '--memory', '64m', TAG, '--', 'sh', '-c', 'x=$(head -c 400000000 /dev/zero | tr "\\0" a); echo ${#x}']);
    expect(r.code, r.stderr).toBe(137);
    expect(r.stderr).toContain('warning: command ended: oom');
  });

  it('stops its sandbox with it on Ctrl-Z (TSTP) and continues it with it, leaving a process the sandbox stopped itself stopped', async () => {
    const store = storeOf('store-tstp');
    const [running, selfStopped] = [sleepMarker(), sleepMarker()];
    const stopsItself = `kill -STOP $$; exec sleep ${selfStopped}`;
    const job = start(store, [TAG, '--', 'sh', '-c', `sh -c '${stopsItself}' & exec sleep ${running}`]);
    const sleeping = (): string[] => statesOf(`sleep\0${running}\0`);
    const stoppedItself = (): string[] => statesOf(`sh\0-c\0${stopsItself}\0`);
    const launcher = job.child.pid ?? 0;
    await eventually(() => sleeping().length > 0 && stoppedItself().includes('T'));
    job.child.kill('SIGTSTP');
    await eventually(() => stateOf(launcher) === 'T' && sleeping().every((s) => s === 'T'));
    job.child.kill('SIGCONT');
    await eventually(() => stateOf(launcher) !== 'T' && sleeping().every((s) => s !== 'T'));
    expect(stoppedItself()).toEqual(['T']);
    job.child.kill('SIGTERM');
    expect((await job.ended).code).toBe(143);
    expect([...sleeping(), ...stoppedItself()]).toEqual([]);
  });

  it('kills the command on a TERM or QUIT (143, 131); killed itself, it takes the command along and the next run reaps the rest', async () => {
    const store = storeOf('store-killed');
    const marker = sleepMarker();
    // QUIT (Ctrl-\) by default ends a process without its teardown
    for (const signal of ['SIGTERM', 'SIGQUIT'] as const) {
      const job = start(store, [TAG, '--', 'sleep', marker]);
      await eventually(() => sleepRuns(marker));
      const f = footprintOf(store);
      job.child.kill(signal);
      const end = await job.ended;
      expect(end.code, signal).toBe(signal === 'SIGTERM' ? 143 : 131);
      expect(end.stderr).toContain(`warning: command ended: killed (${signal})`);
      expect(sleepRuns(marker)).toBe(false);
      expectGone(store, f);
    }

    const killed = start(store, [TAG, '--', 'sleep', marker]);
    await eventually(() => sleepRuns(marker));
    const left = footprintOf(store);
    killed.child.kill('SIGKILL');
    await killed.ended;
    await eventually(() => !sleepRuns(marker));
    expect(entries(join(store, 'sandboxes'))).toEqual([left.id]);
    const next = await run(store, ['run', TAG, '--', 'true']);
    expect(next.code, next.stderr).toBe(0);
    expectGone(store, left);
  });
});
