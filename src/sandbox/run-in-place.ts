/**
 * runOnce for a process that has nothing left to do once its command runs, the CLI's `run`: the
 * sandbox is prepared as runOnce prepares it (prepare.ts), and then this process becomes the
 * launcher (execve, util/exec-in-place.ts) in its `own-run` mode, which runs the command, ends it
 * on Ctrl-C, TERM, HUP or the timeout, exits with the status the CLI gives a runOnce outcome and
 * tears the sandbox down. No fork of node per run, no node waiting beside the command (its memory
 * stays in use for the whole run) and no node exit after it: ~27 ms of a one-shot run here.
 *
 * The process keeps its pid through exec, and so its start time: the state file and the lease
 * name it as their owner while the launcher runs, and if it is killed, what it leaves is reaped as
 * after a killed runtime. Only a tmpfs upper is torn down by the launcher (empty dirs on the
 * host's side); a disk upper, with its files of subordinate ids, is left to the reap.
 */
import { join } from 'node:path';
import type { ExecInPlace } from '../util/exec-in-place.js';
import { HOST_PATH, type OwnRunSpec, ownRunCommand } from './commands.js';
import { checkOneShotLine, oneShotCommand, prepareOneShot } from './one-shot.js';
import { endSandbox } from './prepare.js';
import { processStartTime } from './proc.js';
import type { RunOnceOptions } from './run-once.js';
import type { CreateHooks, SandboxOptions } from './sandbox.js';
import { type SandboxState, sandboxDir, writeState } from './state.js';

export type RunInPlaceOptions = Pick<RunOnceOptions, 'timeoutMs' | 'env' | 'workdir' | 'user'>;

export interface RunInPlaceHooks extends Pick<CreateHooks, 'host' | 'onCreated' | 'warn'> {
  /** Files the launcher removes last (the lease onCreated took), since no code of ours runs after the command. */
  releasedFiles?: (state: SandboxState) => string[];
  /** Undoes onCreated where the hand-over fails (this process then goes on). */
  onDestroyed?: CreateHooks['onDestroyed'];
}

/**
 * Runs `argv` in a new sandbox over `input`'s layers, with our stdio, by becoming the launcher:
 * never returns but by throwing, when the sandbox could not be prepared or the exec failed (what
 * was prepared is then removed).
 */
export async function runInPlace(
  input: SandboxOptions,
  argv: string[],
  run: RunInPlaceOptions,
  execve: ExecInPlace,
  hooks: RunInPlaceHooks = {},
): Promise<never> {
  const { opts, prepared: p } = await prepareOneShot('runInPlace', input, argv, run, hooks);
  const { state } = p;
  try {
    await hooks.onCreated?.(state);
    const cmd = oneShotCommand(opts, p, run, argv);
    const command = ownRunCommand(p.spec, cmd, {
      timeoutMs: run.timeoutMs ?? opts.commandTimeoutMs,
      oomFile: p.cgroup?.oomFile,
      cleanup: cleanupSteps(opts.stateDir, state, hooks.releasedFiles?.(state) ?? []),
    });
    checkOneShotLine(command, cmd);
    // the launcher is this process from here on: the holder a reap would kill
    state.holderPid = process.pid;
    state.holderStartTime = processStartTime(process.pid);
    writeState(opts.stateDir, state);
    return execve(command[0] ?? '', command, { PATH: HOST_PATH });
  } catch (e) {
    await endSandbox(opts.stateDir, state, p.cgroup);
    await hooks.onDestroyed?.(state);
    throw e;
  }
}

/** The runtime's teardown of a one-shot sandbox (state.ts teardown, prepare.ts endSandbox) as launcher steps. */
export function cleanupSteps(stateDir: string, state: SandboxState, releasedFiles: string[]): OwnRunSpec['cleanup'] {
  const cgroups = state.cgroupDirs.map((path) => ({ op: 'cgroup' as const, path }));
  // a disk upper holds files of the sandbox's ids: the reap's (removeTree), with the rest after it
  if (state.upperKind !== 'tmpfs') return cgroups;
  const dir = sandboxDir(stateDir, state.id);
  return [
    ...cgroups,
    { op: 'unlink', path: join(dir, 'state.json') },
    { op: 'rmdir', path: state.upperDir },
    { op: 'rmdir', path: state.mergedDir },
    { op: 'rmdir', path: dir },
    // the id range only once every process and file of it is gone (as teardown releases it)
    ...(state.idSlot === undefined ? [] : [{ op: 'unlink' as const, path: state.idSlot }]),
    ...releasedFiles.map((path) => ({ op: 'unlink' as const, path })),
  ];
}
