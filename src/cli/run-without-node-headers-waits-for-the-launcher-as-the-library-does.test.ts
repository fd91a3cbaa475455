/**
 * Where node's headers are missing, the exec addon cannot be built (util/exec-in-place.ts) and
 * `run` falls back to the library's path: node spawns the launcher with the caller's stdio, waits
 * and tears down. Same exit codes and output as the in-place path, nothing left behind, and
 * `check` says why. The node here is this one's binary in a directory with no include/ beside it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, linkSync, mkdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { CLI, runCli } from '../../test/helpers/run-cli.js';
import { sleepMarker, sleepRuns } from '../../test/helpers/sleep-marker.js';
import { readdirOrEmpty } from '../util/fs.js';

const TAG = 'noheaders/busybox';
const { work } = publishedBusybox('ms-run-no-headers-', TAG);

/** PATH with a node first whose headers (../include/node from its binary) do not exist. */
function headerlessEnv(): NodeJS.ProcessEnv {
  const bin = join(work, 'headerless', 'bin');
  mkdirSync(bin, { recursive: true });
  const node = join(bin, 'node');
  try {
    linkSync(process.execPath, node); // process.execPath is then this path, not the original's
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') copyFileSync(process.execPath, node); // another file system
  }
  return { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` };
}

describe('minisandbox run where node has no headers', () => {
  const env = headerlessEnv();
  const store = join(work, 'store');
  const common = ['--registry', join(work, 'registry'), '--store', store];

  it('check says the exec addon is not built, and why', async () => {
    const r = await runCli([...common, 'check'], env);
    expect(r.stdout).toMatch(/^exec +\(not built: no node headers/m);
  });

  it('waits for the launcher as a node process, with the same codes and output, and leaves nothing behind', async () => {
    const ok = await runCli([...common, 'run', TAG, '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'], env);
    expect(ok.code, ok.stderr).toBe(3);
    expect(ok.stdout).toBe('out\n');
    expect(ok.stderr).toBe('err\n');
    const missing = await runCli([...common, 'run', TAG, '--', '/no/such/command'], env);
    expect(missing.code, missing.stderr).toBe(127);

    const marker = sleepMarker();
    const child: ChildProcess = spawn(CLI, [...common, 'run', TAG, '--', 'sleep', marker], { stdio: 'ignore', env });
    const ended = new Promise<number | null>((done) => child.on('close', (code) => done(code)));
    await eventually(() => sleepRuns(marker));
    // not exec'd away: the CLI's pid is still the node it started as
    expect(readlinkSync(`/proc/${child.pid}/exe`)).toBe(join(work, 'headerless', 'bin', 'node'));
    child.kill('SIGTERM');
    expect(await ended).toBe(143);
    expect(sleepRuns(marker)).toBe(false);
    expect(await readdirOrEmpty(join(store, 'sandboxes'))).toEqual([]);
    expect(await readdirOrEmpty(join(store, 'leases'))).toEqual([]);
  });
});
