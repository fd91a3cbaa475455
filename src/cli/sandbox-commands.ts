/** Commands that run sandboxes: run (one command, exit code passed through) and sandbox housekeeping. */
import type { Command } from 'commander';
import { MinisandboxError } from '../errors.js';
import { openSandbox, reapStale } from '../runtime/open.js';
import { attach } from '../runtime/shell.js';
import { type CommandOutcome, probeHost } from '../sandbox/index.js';
import { currentUser } from '../sandbox/subid.js';
import { fsmetaHelper } from '../store/fsmeta.js';
import { type GlobalOptions, makeContext, storeContext, parseDuration, parseEnvPairs, parseSize } from './context.js';

type Globals = () => GlobalOptions;

/** Exit codes for outcomes that are not a plain exit, following timeout(1) and shells. */
export function outcomeExitCode(o: CommandOutcome): number {
  switch (o.status) {
    case 'ok':
      return o.exitCode ?? 1;
    case 'timeout':
      return 124;
    case 'oom':
      return 137;
    case 'killed':
      return 128 + signalNumber(o.signal);
    case 'infra_error':
      return 125;
  }
}

function signalNumber(sig: string | null): number {
  const table: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGTERM: 15 };
  return sig === null ? 9 : (table[sig] ?? 9);
}

interface RunOpts {
  network: 'none' | 'host';
  timeout?: string;
  memory?: string;
  pids?: string;
  cpus?: string;
  disk?: string;
  workdir?: string;
  env?: string[];
  maxOutput: string;
}

export function registerSandboxCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  program
    .command('run')
    .description("run one command in a fresh sandbox of an environment; exits with the command's exit code (124 timeout, 137 oom, 125 runtime error)")
    .argument('<ref>')
    .argument('<cmd...>', 'command and arguments (after --)')
    .option('--network <mode>', 'none (loopback only) or host', 'none')
    .option('--timeout <duration>', 'wall-clock limit for the command, e.g. 30s, 10m')
    .option('--memory <size>', 'memory limit, e.g. 2g')
    .option('--pids <n>', 'process limit')
    .option('--cpus <n>', 'CPU limit in cores')
    .option('--disk <size>', 'size cap of the writable layer', '1g')
    .option('--workdir <dir>', 'working directory inside the sandbox')
    .option('--env <K=V...>', 'environment variables')
    .option('--max-output <size>', 'keep at most this much of stdout and of stderr', '16m')
    .action(async (ref: string, cmd: string[], o: RunOpts) => {
      const ctx = await storeContext(globals());
      if (o.network !== 'none' && o.network !== 'host') throw new MinisandboxError('USAGE', `--network must be none or host, not ${o.network}`);
      const limits: Record<string, number> = { diskBytes: parseSize(o.disk ?? '1g') };
      if (o.memory !== undefined) limits.memoryBytes = parseSize(o.memory);
      if (o.pids !== undefined) limits.pids = Number.parseInt(o.pids, 10);
      if (o.cpus !== undefined) limits.cpus = Number(o.cpus);
      const config: Record<string, unknown> = { env: parseEnvPairs(o.env) };
      if (o.workdir !== undefined) config.workdir = o.workdir;
      await reapStale(ctx.store);
      const sb = await openSandbox(ctx.registry, ctx.store, ref, {
        network: o.network,
        limits,
        config,
        maxOutputBytes: parseSize(o.maxOutput),
        onPull: (p) => ctx.out.progress({ ...p, message: `pull ${ref}: ${p.phase} layer ${p.layer.slice(7, 19)}` }),
        warn: (m) => ctx.out.warn(m),
      });
      ctx.out.done();
      const stop = (): void => void sb.destroy();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        const outcome = await sb.exec(cmd, o.timeout === undefined ? {} : { timeoutMs: parseDuration(o.timeout) });
        if (ctx.out.json) ctx.out.result({ ref, sandbox: sb.id, ...outcome }, () => '');
        else {
          process.stdout.write(outcome.stdout);
          process.stderr.write(outcome.stderr);
          if (outcome.stdoutTruncated || outcome.stderrTruncated) ctx.out.warn('output was truncated (raise --max-output)');
          if (outcome.status !== 'ok') ctx.out.warn(`command ended: ${outcome.status}${outcome.error ? ` (${outcome.error})` : ''}`);
        }
        setExit(outcomeExitCode(outcome));
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        await sb.destroy();
      }
    });

  program
    .command('shell')
    .description('an interactive shell in a fresh sandbox of an environment (destroyed when the shell exits)')
    .argument('<ref>')
    .option('--network <mode>', 'none (loopback only) or host', 'none')
    .option('--workdir <dir>', 'working directory inside the sandbox')
    .option('--env <K=V...>', 'environment variables')
    .action(async (ref: string, o: { network: 'none' | 'host'; workdir?: string; env?: string[] }) => {
      const ctx = await storeContext(globals());
      if (o.network !== 'none' && o.network !== 'host') throw new MinisandboxError('USAGE', `--network must be none or host, not ${o.network}`);
      const config: Record<string, unknown> = { env: parseEnvPairs(o.env) };
      if (o.workdir !== undefined) config.workdir = o.workdir;
      await reapStale(ctx.store);
      const sb = await openSandbox(ctx.registry, ctx.store, ref, { network: o.network, config, warn: (m) => ctx.out.warn(m) });
      ctx.out.done();
      try {
        // bash when the environment has it; a busybox or minimal root may only have sh
        const probe = await sb.exec(['/bin/sh', '-c', 'command -v bash']);
        setExit(await attach(sb, probe.exitCode === 0 ? ['bash', '-i'] : ['sh', '-i']));
      } finally {
        await sb.destroy();
      }
    });

  program
    .command('check')
    .description("check that this host can run sandboxes (tools, subordinate ids, user namespaces) and compile the native helpers; exit 4 with what to fix")
    .action(async () => {
      const ctx = makeContext(globals());
      const host = await probeHost();
      const { path: fsmeta, has: fsmetaFrames } = await fsmetaHelper();
      const r = { user: currentUser().name, isRoot: host.isRoot, idMap: host.idMap, tools: host.tools, fsmeta, fsmetaFrames, store: ctx.store.root };
      ctx.out.result(r, () =>
        [
          `user ${r.user}${r.isRoot ? ' (root)' : ''}: sandboxes map ids 0..${host.idMap.count - 1} to ${host.idMap.uidStart}.. (uids) and ${host.idMap.gidStart}.. (gids)`,
          `launcher ${host.tools.launcher}`,
          `fsmeta   ${fsmeta}${fsmetaFrames ? '' : ' (without frame decoding: pulls decode and lay out in node, more slowly; apt-get install libzstd-dev libssl-dev)'}`,
          `store    ${r.store}`,
          'ok',
        ].join('\n'),
      );
    });
}
