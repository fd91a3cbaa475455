#!/usr/bin/env node
/**
 * The `minisandbox` command: a thin commander layer over the library.
 *
 * Start-up is part of every sandboxed command's cost, so nothing is loaded before it is needed:
 * `--version` answers before commander is imported, the command modules define options only
 * (their values are parsed by options.ts before any action runs), and each action imports what it
 * uses (the bundle is split per import by esbuild; see package.json `build`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GlobalOptions } from './context.js';

/** The package's version: package.json sits one level up from the bundled dist/, two from src/cli/. */
function packageVersion(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const file of [join(here, '..', 'package.json'), join(here, '..', '..', 'package.json')]) {
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
    if (pkg.name === 'minisandbox' && typeof pkg.version === 'string') return pkg.version;
  }
  return 'unknown';
}

export async function main(argv: string[]): Promise<number> {
  if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
    process.stdout.write(`${packageVersion()}\n`);
    return 0;
  }
  const [
    { Command, CommanderError },
    { EXIT, Output, PROGRESS_MODES },
    { opt },
    { registerBuildCommands },
    { registerSandboxCommands },
    { registerScoreCommands },
    { registerStoreCommands },
    { registerServeCommand },
    { registerSweAgentCommand },
  ] = await Promise.all([
    import('commander'),
    import('./output.js'),
    import('./options.js'),
    import('./build-commands.js'),
    import('./sandbox-commands.js'),
    import('./score-commands.js'),
    import('./store-commands.js'),
    import('./serve-command.js'),
    import('./swe-agent-command.js'),
  ]);
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
    .exitOverride();
  const globals = (): GlobalOptions => program.opts<GlobalOptions>();
  const setExit = (c: number): void => {
    exitCode = c;
  };
  registerStoreCommands(program, globals, setExit);
  registerSandboxCommands(program, globals, setExit);
  registerBuildCommands(program, globals, setExit);
  registerScoreCommands(program, globals, setExit);
  registerServeCommand(program, globals, setExit);
  registerSweAgentCommand(program, globals, setExit);
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
