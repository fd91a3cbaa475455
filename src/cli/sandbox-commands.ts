/**
 * Commands that run sandboxes: run (one command, exit code passed through) and sandbox housekeeping.
 * The runtime is imported inside each action: loading it is most of a command's start-up, and
 * `--help` or a bad option should not pay for it.
 */
import type { Command } from 'commander';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { PullOptions } from '../store/pull.js';
import { type GlobalOptions, makeContext, storeContext } from './context.js';
import { opt, option } from './options.js';
import { mountOption, volumeOption } from './mount-options.js';
import type { BindMount } from '../sandbox/bind-mounts.js';
import { mark } from '../util/timing.js';

type Globals = () => GlobalOptions;

/**
 * Exit codes for outcomes that are not a plain exit, following timeout(1), shells, docker and
 * podman: 127 a command not found, 126 one found but not executable, 125 any other runtime error.
 */
export function outcomeExitCode(o: CommandOutcome): number {
  switch (o.status) {
    case 'ok':
      return o.exitCode ?? 1;
    case 'timeout':
      return 124;
    case 'oom':
      return 137;
    case 'killed':
      // the command's own death by a signal says which (128 + n, as shells report it); ours is a SIGKILL
      return o.exitCode !== null && o.exitCode > 128 ? o.exitCode : 128 + signalNumber(o.signal);
    case 'infra_error':
      return o.exitCode === 126 || o.exitCode === 127 ? o.exitCode : 125;
  }
}

function signalNumber(sig: string | null): number {
  const table: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGTERM: 15 };
  return sig === null ? 9 : (table[sig] ?? 9);
}

interface RunOpts {
  network: 'none' | 'host';
  timeout?: number;
  memory?: number;
  pids?: number;
  cpus?: number;
  disk: number;
  workdir?: string;
  env: Record<string, string>;
  maxOutput: number;
  mount: BindMount[];
  volume: BindMount[];
}

/** `--mount` and `-v`, as run and shell take them (mount-options.ts). */
function mountOptions(c: Command): Command {
  return c
    .addOption(
      option('--mount <spec>', 'a host path in the sandbox: type=bind,source=HOST,target=PATH[,readonly] (repeat for more)', mountOption(), {
        value: [],
        shown: 'none',
      }),
    )
    .addOption(
      option('-v, --volume <HOST:PATH[:ro]>', 'the same as Docker writes it (read-only unless you own HOST or add :rw)', volumeOption(), {
        value: [],
        shown: 'none',
      }),
    );
}

const NETWORK = ['none', 'host'] as const;

function limitsOf(o: Pick<RunOpts, 'disk' | 'memory' | 'pids' | 'cpus'>): Record<string, number> {
  const limits: Record<string, number> = { diskBytes: o.disk };
  if (o.memory !== undefined) limits.memoryBytes = o.memory;
  if (o.pids !== undefined) limits.pids = o.pids;
  if (o.cpus !== undefined) limits.cpus = o.cpus;
  return limits;
}
const NO_FRAMES = 'without frame decoding: pulls decode and lay out in node, more slowly; apt-get install libzstd-dev libssl-dev';

export function registerSandboxCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  mountOptions(
    program
      .command('run')
      .description("run one command in a fresh sandbox of an environment; exits with the command's exit code (124 timeout, 137 oom, 125 runtime error)")
      .argument('<ref>')
      .argument('[cmd...]', "command and arguments (default: the environment's entrypoint and command, else a shell)")
      .option('--network <mode>', 'none (loopback only) or host', opt.oneOf(NETWORK), 'none')
      .option('--timeout <duration>', 'wall-clock limit for the command, e.g. 30s, 10m', opt.duration())
      .option('--memory <size>', 'memory limit, e.g. 2g', opt.size({ min: 1024 ** 2 }))
      .option('--pids <n>', 'process limit', opt.int({ min: 1 }))
      .option('--cpus <n>', 'CPU limit in cores, e.g. 0.5', opt.number({ positive: true, max: 4096 }))
      .addOption(option('--disk <size>', 'size cap of the writable layer', opt.size({ min: 1024 ** 2 }), { value: 1024 ** 3, shown: '1g' }))
      .option('--workdir <dir>', 'working directory inside the sandbox (absolute)', opt.sandboxPath())
      .addOption(option('-e, --env <K=V>', 'an environment variable (repeat for more)', opt.envPair(), { value: {}, shown: 'none' }))
      .addOption(
        option('--max-output <size>', 'with --json: keep at most this much of stdout and of stderr', opt.size(), { value: 16 * 1024 ** 2, shown: '16m' }),
      ),
  ).action(async (ref: string, cmd: string[], o: RunOpts) => {
    // `auto` progress is silent here when stderr is not a terminal: it is the command's stderr
    mark('run: options parsed');
    const ctx = await storeContext(globals(), { progressWhenNotTty: 'none' });
    mark('run: store context');
    const { runOnce, runInPlace, reapStale } = await import('../runtime/open.js');
    mark('run: runtime loaded');
    const limits = limitsOf(o);
    const config: Record<string, unknown> = { env: o.env };
    if (o.workdir !== undefined) config.workdir = o.workdir;
    await reapStale(ctx.store);
    mark('run: stale reaped');
    // A layer already here is shown only where progress was asked for: `auto` would have to ask
    // whether stderr is a terminal, and the first read of process.stderr costs ~5 ms on a pipe.
    const showCached = (globals().progress ?? 'auto') !== 'auto';
    const onPull: NonNullable<PullOptions['onProgress']> = (p) => {
      // the bytes of a fetch as they come are for the pull command's bar: run says its phases
      if (p.doneBytes !== undefined) return;
      if (p.phase !== 'cached' || showCached) ctx.out.progress({ ...p, message: `pull ${ref}: ${p.phase} layer ${p.layer.slice(7, 19)}` });
    };
    // Ctrl-C or a TERM cancels a pull or start in progress, and kills a running command
    const abort = new AbortController();
    // the exit status of a run we ended is 128 + the signal that asked (130 for Ctrl-C), as shells give
    let stoppedBy: NodeJS.Signals | undefined;
    const stop = (sig: NodeJS.Signals): void => {
      stoppedBy ??= sig;
      abort.abort(new Error('interrupted'));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    // no command and none of the environment's own: a shell, interactive on a terminal
    // (node:tty loads net: only asked for when it is needed)
    const defaultCommand = cmd.length > 0 ? undefined : (await import('node:tty')).isatty(0) ? ['/bin/sh', '-i'] : ['/bin/sh'];
    const open = {
      network: o.network,
      limits,
      config,
      mounts: [...o.mount, ...o.volume],
      signal: abort.signal,
      ...(o.timeout === undefined ? {} : { timeoutMs: o.timeout }),
      onPull,
      warn: (m: string) => ctx.out.warn(m),
    };
    try {
      // Without --json nothing of ours runs after the command: this process becomes the launcher,
      // which ends and reports the run as below (sandbox/run-in-place.ts); else, where the addon
      // that execs cannot be built here, it waits for the launcher as a library caller does.
      const execve = ctx.out.json ? undefined : await (await import('../util/exec-in-place.js')).loadExecInPlace();
      // the progress line is gone before the command writes to the terminal
      if (execve !== undefined) await runInPlace(ctx.registry, ctx.store, ref, cmd, execve, { ...open, defaultCommand, onStart: () => ctx.out.done() });
      let sandbox = '';
      // The command's output streams straight to ours, its stdin is ours; --json keeps it for the record.
      const outcome = await runOnce(ctx.registry, ctx.store, ref, cmd, {
        ...open,
        maxOutputBytes: o.maxOutput,
        stdio: ctx.out.json ? 'capture' : 'inherit',
        stdin: 'inherit',
        defaultCommand,
        onStart: (id) => {
          sandbox = id;
          ctx.out.done();
        },
      });
      mark('run: command done, sandbox destroyed');
      if (ctx.out.json) ctx.out.result({ ref, sandbox, ...outcome }, () => '');
      else {
        // a command that could not start already said why on its stderr (127/126 say which)
        if (outcome.status !== 'ok' && !(outcome.status === 'infra_error' && outcomeExitCode(outcome) !== 125)) {
          const why = outcome.error ?? (outcome.status === 'killed' ? stoppedBy : undefined);
          ctx.out.warn(`command ended: ${outcome.status}${why === undefined ? '' : ` (${why})`}`);
        }
      }
      setExit(stoppedBy !== undefined && outcome.status === 'killed' ? 128 + signalNumber(stoppedBy) : outcomeExitCode(outcome));
    } finally {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
    }
  });

  mountOptions(
    program
      .command('shell')
      .description('an interactive shell (or CMD) on a terminal in a fresh sandbox of an environment (destroyed when it exits); `run -it` is the same')
      .argument('<ref>')
      .argument('[cmd...]', 'a program to run on the terminal instead of a shell')
      .option('--network <mode>', 'none (loopback only) or host', opt.oneOf(NETWORK), 'none')
      .option('--workdir <dir>', 'working directory inside the sandbox (absolute)', opt.sandboxPath())
      .addOption(option('-e, --env <K=V>', 'an environment variable (repeat for more)', opt.envPair(), { value: {}, shown: 'none' }))
      .option('--memory <size>', 'memory limit, e.g. 2g', opt.size({ min: 1024 ** 2 }))
      .option('--pids <n>', 'process limit', opt.int({ min: 1 }))
      .option('--cpus <n>', 'CPU limit in cores, e.g. 0.5', opt.number({ positive: true, max: 4096 }))
      .addOption(option('--disk <size>', 'size cap of the writable layer', opt.size({ min: 1024 ** 2 }), { value: 1024 ** 3, shown: '1g' })),
  ).action(async (ref: string, cmd: string[], o: Omit<RunOpts, 'timeout' | 'maxOutput'>) => {
    const ctx = await storeContext(globals());
    const { openSandbox, reapStale } = await import('../runtime/open.js');
    const { attach } = await import('../runtime/shell.js');
    const config: Record<string, unknown> = { env: o.env };
    if (o.workdir !== undefined) config.workdir = o.workdir;
    await reapStale(ctx.store);
    const sb = await openSandbox(ctx.registry, ctx.store, ref, {
      network: o.network,
      limits: limitsOf(o),
      config,
      mounts: [...o.mount, ...o.volume],
      warn: (m) => ctx.out.warn(m),
    });
    ctx.out.done();
    try {
      // bash when the environment has it; a busybox or minimal root may only have sh
      const shell = async (): Promise<string[]> => ((await sb.exec(['/bin/sh', '-c', 'command -v bash'])).exitCode === 0 ? ['bash', '-i'] : ['sh', '-i']);
      setExit(await attach(sb, cmd.length > 0 ? cmd : await shell()));
    } finally {
      await sb.destroy();
    }
  });

  program
    .command('check')
    .description('check that this host can run sandboxes (tools, subordinate ids, user namespaces) and compile the native helpers; exit 4 with what to fix')
    .action(async () => {
      const ctx = await makeContext(globals());
      const [{ probeHost }, { currentUser }, { fsmetaHelper }, { nativeAddon }] = await Promise.all([
        import('../sandbox/host.js'),
        import('../host/subid.js'),
        import('../store/fsmeta.js'),
        import('../util/native.js'),
      ]);
      const host = await probeHost();
      const { path: fsmeta, has: fsmetaFrames } = await fsmetaHelper();
      // where node's headers are missing, `run` waits for the launcher instead of becoming it
      const execInPlace = (await nativeAddon('exec-in-place')) ?? null;
      const r = {
        user: currentUser().name,
        isRoot: host.isRoot,
        idMap: host.idMap,
        tools: host.tools,
        fsmeta,
        fsmetaFrames,
        execInPlace,
        store: ctx.store.root,
      };
      ctx.out.result(r, () =>
        [
          `user ${r.user}${r.isRoot ? ' (root)' : ''}: sandboxes map ids 0..${host.idMap.count - 1} ` +
            `to ${host.idMap.uidStart}.. (uids) and ${host.idMap.gidStart}.. (gids)`,
          `launcher ${host.tools.launcher}`,
          `fsmeta   ${fsmeta}${fsmetaFrames ? '' : ` (${NO_FRAMES})`}`,
          `exec     ${execInPlace ?? '(not built: no node headers; run waits for the launcher, ~50 MB more per run)'}`,
          `store    ${r.store}`,
          'ok',
        ].join('\n'),
      );
    });
}
