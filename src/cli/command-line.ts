/**
 * What a command line names, read before anything else is loaded: the package's version (for
 * `--version`) and the command word, which picks the one module to load (main.ts) and the code
 * cache to use (bundle-loader.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's version: package.json sits one level up from the bundled dist/, two from src/cli/. */
export function packageVersion(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const file of [join(here, '..', 'package.json'), join(here, '..', '..', 'package.json')]) {
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
    if (pkg.name === 'minisandbox' && typeof pkg.version === 'string') return pkg.version;
  }
  return 'unknown';
}

/** `minisandbox --version` (or -V) and nothing else: answered before the CLI's code is loaded. */
export function asksForVersionOnly(argv: string[]): boolean {
  return argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V');
}

/** Global options that take a value (commander's `--opt value` and `--opt=value`). */
const GLOBAL_WITH_VALUE = new Set(['--registry', '--store', '--progress']);
const GLOBAL_FLAGS = new Set(['--json']);

/**
 * Where the command word of a command line is: the first argument after the global options, or -1
 * when something else comes first (help, an unknown option), for which every command is loaded.
 */
export function commandIndex(argv: readonly string[]): number {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (GLOBAL_FLAGS.has(a)) continue;
    if (GLOBAL_WITH_VALUE.has(a)) {
      i++;
      continue;
    }
    if (a.startsWith('--') && GLOBAL_WITH_VALUE.has(a.slice(0, a.indexOf('=')))) continue;
    return a.startsWith('-') ? -1 : i;
  }
  return -1;
}

/** The command word of a command line (see commandIndex), or undefined. */
export function commandName(argv: readonly string[]): string | undefined {
  const i = commandIndex(argv);
  return i < 0 ? undefined : argv[i];
}

export type CommandModule = 'build' | 'run' | 'score' | 'serve' | 'store' | 'swe-agent';

/** The module that defines each command. */
export const COMMANDS = new Map<string, CommandModule>([
  ['build', 'build'],
  ['run', 'run'],
  ['shell', 'run'],
  ['check', 'run'],
  ['score', 'score'],
  ['validate', 'score'],
  ['serve', 'serve'],
  ['swe-agent-instances', 'swe-agent'],
  ...['import', 'export', 'pull', 'copy', 'ls', 'inspect', 'verify', 'gc', 'audit', 'tag', 'rm'].map((c) => [c, 'store'] as const),
]);

/** The command module a command line uses, or undefined when it names none (every module is loaded). */
export function commandModule(argv: readonly string[]): CommandModule | undefined {
  const name = commandName(argv);
  return name === undefined ? undefined : COMMANDS.get(name);
}
