/**
 * What both kinds of one-shot run start with (run-once.ts spawns the launcher and waits;
 * run-in-place.ts becomes it): the options checked, the host probed, the sandbox prepared, and the
 * command's part of the launcher's line, the run's overrides over the environment's config.
 */
import { InvalidInputError } from '../errors.js';
import { checkExecFits, checkLauncherFits, envStrings, stringsBytes } from './arg-max.js';
import { commandEnv, DEFAULT_CAPS, HOST_PATH, type EnterSpec } from './commands.js';
import { probeHost } from './host.js';
import { type PreparedSandbox, prepareSandbox } from './prepare.js';
import { type CreateHooks, type SandboxOptions, SandboxOptionsSchema } from './sandbox.js';

type ParsedOptions = ReturnType<typeof SandboxOptionsSchema.parse>;

/** What a one-shot run may override of the environment's config. */
export interface OneShotOverrides {
  env?: Record<string, string>;
  workdir?: string;
  user?: { uid: number; gid: number };
}

/** Checks what can be checked before anything is made (the command must fit one exec, see arg-max.ts), then prepares the sandbox. */
export async function prepareOneShot(
  caller: string,
  input: SandboxOptions,
  argv: string[],
  run: OneShotOverrides,
  hooks: Pick<CreateHooks, 'host' | 'warn'>,
): Promise<{ opts: ParsedOptions; prepared: PreparedSandbox }> {
  if (argv.length === 0) throw new InvalidInputError(`${caller} needs a command`, 'pass an argv array with at least the program');
  const opts = SandboxOptionsSchema.parse(input);
  if (opts.prewarmReset || opts.timeoutMs !== undefined)
    throw new InvalidInputError(`${caller} takes no prewarmReset or sandbox timeoutMs`, 'its sandbox lives as long as the command: pass the run timeoutMs');
  checkExecFits(argv, commandEnv({ ...opts.config.env, ...(run.env ?? {}) }));
  const host = hooks.host ?? (await probeHost());
  const warn = hooks.warn ?? ((m: string) => process.emitWarning(m, 'MinisandboxWarning'));
  return { opts, prepared: await prepareSandbox(opts, host, warn) };
}

export function oneShotCommand(
  opts: ParsedOptions,
  p: PreparedSandbox,
  run: OneShotOverrides,
  argv: string[],
): Pick<EnterSpec, 'caps' | 'user' | 'env' | 'argv' | 'rlimits' | 'workdir'> {
  return {
    caps: opts.capabilities === 'default' ? DEFAULT_CAPS : [],
    user: run.user ?? opts.config.user,
    env: { ...opts.config.env, ...(run.env ?? {}) },
    workdir: run.workdir ?? opts.config.workdir,
    rlimits: p.rlimits,
    argv,
  };
}

/**
 * The launcher's exec (`run`, `own-run`) carries the command's argv and variables on its own
 * command line: it must fit one exec too. Past it, the larger of argv and env is named.
 */
export function checkOneShotLine(line: string[], command: Pick<EnterSpec, 'env' | 'argv'>): void {
  const envBigger = stringsBytes(envStrings(commandEnv(command.env))) > stringsBytes(command.argv);
  checkLauncherFits(line, { PATH: HOST_PATH }, envBigger ? 'env' : 'argv');
}
