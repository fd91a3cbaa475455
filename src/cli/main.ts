#!/usr/bin/env node
/**
 * The `minisandbox` command: a thin commander layer over the library.
 *
 * Start-up is part of every sandboxed command's cost, so nothing is loaded before it is needed:
 * `--version` answers before commander is imported, only the module of the command named is loaded
 * (all of them for help or an unknown command), the command modules define options only
 * (their values are parsed by options.ts before any action runs), and each action imports what it
 * uses (in the bundle, a module imported dynamically runs on its first import: bin/build-cli.mjs).
 * The built CLI's entry, dist/cli.cjs, answers `--version` before even this file is loaded
 * (bundle-loader.ts).
 */
import type { Command } from 'commander';
import type { GlobalOptions } from './context.js';
import { asksForVersionOnly, type CommandModule, commandModule, packageVersion } from './command-line.js';
import { applyDockerHabits } from './docker-habits.js';
import { mark } from '../util/timing.js';
import { restoreExtraCaEnv } from '../util/extra-ca.js';

type Register = (program: Command, globals: () => GlobalOptions, setExit: (code: number) => void) => void;

/**
 * Set by bin/build-cli.mjs in a per-command bundle: the one command module that bundle holds (the
 * entry picks the bundle by the command line's module). Undefined in the bundle of every module
 * (help, an unknown command) and when run from source.
 */
declare const MSB_BUNDLE_MODULE: CommandModule | undefined;

/** A module left out of this bundle: the entry never runs a bundle for a command it lacks. */
const notBundled = async (): Promise<Register> => {
  throw new Error('this CLI bundle does not hold that command: rebuild with `npm run build:cli`');
};

/**
 * The module that defines each command: a command line naming one loads only that module. Each
 * entry is written out so that esbuild folds the conditions of a per-command bundle and leaves
 * the other modules' code out of it.
 */
const COMMAND_MODULES = {
  build:
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'build'
      ? async () => (await import('./build-commands.js')).registerBuildCommands
      : notBundled,
  run:
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'run'
      ? async () => (await import('./sandbox-commands.js')).registerSandboxCommands
      : notBundled,
  score:
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'score'
      ? async () => (await import('./score-commands.js')).registerScoreCommands
      : notBundled,
  serve:
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'serve' ? async () => (await import('./serve-command.js')).registerServeCommand : notBundled,
  store:
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'store'
      ? async () => (await import('./store-commands.js')).registerStoreCommands
      : notBundled,
  'swe-agent':
    typeof MSB_BUNDLE_MODULE !== 'string' || MSB_BUNDLE_MODULE === 'swe-agent'
      ? async () => (await import('./swe-agent-command.js')).registerSweAgentCommand
      : notBundled,
} satisfies Record<CommandModule, () => Promise<Register>>;

/**
 * The register functions for `name`'s module, or every module (in the order of `--help`) when the
 * command line names no known command: commander then lists them all, or says which is unknown.
 */
async function commandModules(one: CommandModule | undefined): Promise<Register[]> {
  if (one !== undefined) return [await COMMAND_MODULES[one]()];
  return Promise.all((['store', 'run', 'build', 'score', 'serve', 'swe-agent'] as const).map((m) => COMMAND_MODULES[m]()));
}

export async function main(given: string[]): Promise<number> {
  mark('main');
  restoreExtraCaEnv();
  if (asksForVersionOnly(given)) {
    process.stdout.write(`${packageVersion()}\n`);
    return 0;
  }
  let argv: string[];
  try {
    argv = applyDockerHabits(given);
  } catch (e) {
    const { Output } = await import('./output.js');
    return new Output(given.includes('--json')).error(e);
  }
  const module = commandModule(argv);
  // the sandbox commands are one-shot processes; a server or a build parses the same schemas often
  if (module === 'run') (await import('./zod-jitless.js')).interpretSchemas();
  const [{ Command, CommanderError }, { EXIT, Output, PROGRESS_MODES }, { opt }, registers] = await Promise.all([
    import('commander'),
    import('./output.js'),
    import('./options.js'),
    commandModules(module),
  ]);
  mark('cli modules loaded');
  const program = new Command();
  let exitCode: number = EXIT.ok;
  program
    .name('minisandbox')
    .version(packageVersion())
    .description('environment cache builder, content-addressed registry and rootless sandbox runtime for RL on coding tasks')
    .option('--registry <dir|s3://bucket/prefix>', 'registry location (env MINISANDBOX_REGISTRY; default ./registry)')
    .option('--store <dir>', 'node-local store (env MINISANDBOX_STORE; default /var/lib/minisandbox as root, else ~/.local/share/minisandbox)')
    .option('--json', 'print the result as JSON on stdout')
    .option(
      '--progress <mode>',
      'progress on stderr: auto (a line on a terminal; JSON lines elsewhere, none for run), plain, json or none',
      opt.oneOf(PROGRESS_MODES),
      'auto',
    )
    // errors are one line naming the option or argument; `--help` shows the rest
    .exitOverride()
    // commander's suggestions point at merely similar commands (ps -> ls, kill -> pull); ours are
    // typos and Docker habits only (docker-habits.ts)
    .showSuggestionAfterError(false);
  const globals = (): GlobalOptions => program.opts<GlobalOptions>();
  const setExit = (c: number): void => {
    exitCode = c;
  };
  for (const register of registers) register(program, globals, setExit);
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) return e.exitCode === 0 ? EXIT.ok : EXIT.invalid;
    return new Output(globals().json === true).error(e);
  }
  return exitCode;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`internal error: ${String(e)}\n`);
    process.exitCode = 1;
  },
);
