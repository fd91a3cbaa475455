#!/usr/bin/env node
/** The `minisandbox` command: a thin commander layer over the library. */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { type GlobalOptions } from './context.js';
import { EXIT, Output } from './output.js';
import { registerBuildCommands } from './build-commands.js';
import { registerSandboxCommands } from './sandbox-commands.js';
import { registerScoreCommands } from './score-commands.js';
import { registerStoreCommands } from './store-commands.js';

/** The package's version: package.json sits two levels up from src/cli/, one from the bundled dist/. */
function packageVersion(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const file = [join(here, '..', '..', 'package.json'), join(here, '..', 'package.json')].find((f) => existsSync(f));
  if (file === undefined) return 'unknown';
  const v = (JSON.parse(readFileSync(file, 'utf8')) as { version?: unknown }).version;
  return typeof v === 'string' ? v : 'unknown';
}

export async function main(argv: string[]): Promise<number> {
  const program = new Command();
  let exitCode: number = EXIT.ok;
  program
    .name('minisandbox')
    .version(packageVersion())
    .description('environment cache builder, content-addressed registry and rootless sandbox runtime for RL on coding tasks')
    .option('--registry <dir|s3://bucket/prefix>', 'registry location (env MINISANDBOX_REGISTRY; default ./registry)')
    .option('--store <dir>', "node-local store (env MINISANDBOX_STORE; default /var/lib/minisandbox as root, else ~/.local/share/minisandbox)")
    .option('--json', 'print the result as JSON on stdout')
    .exitOverride()
    .showHelpAfterError();
  const globals = (): GlobalOptions => program.opts<GlobalOptions>();
  const setExit = (c: number): void => {
    exitCode = c;
  };
  registerStoreCommands(program, globals, setExit);
  registerSandboxCommands(program, globals, setExit);
  registerBuildCommands(program, globals, setExit);
  registerScoreCommands(program, globals, setExit);
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
    process.exitCode = EXIT.failed;
  },
);
