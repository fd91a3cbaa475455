/**
 * The command lines people moving off per-task Docker images type first, given a useful answer:
 * `run -it REF` opens a shell, `run REF ls -la` runs `ls -la` (no `--` needed), `-w` is
 * `--workdir`, `--rm` is accepted (a run's sandbox is always removed), and Docker verbs that
 * minisandbox has under another name (`images`, `rmi`) or not at all (`ps`, `exec`, `-d`) say what
 * to use instead, rather than commander's "unknown option" or a suggestion of an unrelated
 * command (`kill` -> "Did you mean pull?"). Pure: main.ts rewrites argv before anything is loaded.
 */
import { InvalidInputError } from '../errors.js';
import { COMMANDS, commandIndex } from './command-line.js';

/** `run` options that take a value (as `--opt value`; `--opt=value` needs no lookahead). */
const RUN_VALUE_OPTIONS = new Set([
  '--network',
  '--timeout',
  '--memory',
  '--pids',
  '--cpus',
  '--disk',
  '--workdir',
  '-e',
  '--env',
  '--max-output',
  '--mount',
  '-v',
  '--volume',
]);
/** The same for `shell`, which takes a subset of them. */
const SHELL_VALUE_OPTIONS = new Set(['--network', '--workdir', '-e', '--env', '--memory', '--pids', '--cpus', '--disk', '--mount', '-v', '--volume']);

/** Docker `run` flags minisandbox has no use for, with what to do instead. */
const REFUSED_RUN_FLAGS: ReadonlyMap<string, string> = new Map([
  ['-d', 'a run lives as long as its command; for long-lived sandboxes, start `minisandbox serve` and create them over its API'],
  ['--detach', 'a run lives as long as its command; for long-lived sandboxes, start `minisandbox serve` and create them over its API'],
  ['--name', 'a run is named by its sandbox id; for named, long-lived sandboxes use `minisandbox serve`'],
  ['-p', 'there is no port publishing: with `--network host` the sandbox shares the host network and its ports'],
  ['--publish', 'there is no port publishing: with `--network host` the sandbox shares the host network and its ports'],
  ['--privileged', 'sandboxes never get host privileges; root inside a sandbox is an unprivileged host id'],
  ['--entrypoint', 'a command given after the ref replaces the environment entrypoint and command: `run REF -- PROGRAM ARGS`'],
]);

/** Docker commands minisandbox does under another name or not at all. */
const DOCKER_VERBS: ReadonlyMap<string, string> = new Map([
  ['images', 'environments are tags of the registry: `minisandbox ls`'],
  ['rmi', 'remove a tag with `minisandbox rm TAG` (then `minisandbox gc` frees what nothing else uses)'],
  ['untag', 'remove a tag with `minisandbox rm TAG`'],
  ['ps', 'a `run` sandbox lives only as long as its command; `minisandbox serve` lists the sandboxes it holds at GET /v1/sandboxes'],
  ['exec', 'a `run` sandbox lives only as long as its command; to run more commands in one sandbox, use `minisandbox shell REF` or `minisandbox serve`'],
  ['kill', 'a `run` ends with its command (Ctrl-C ends it); sandboxes of `minisandbox serve` are deleted with DELETE /v1/sandboxes/ID'],
  ['stop', 'a `run` ends with its command (Ctrl-C ends it); sandboxes of `minisandbox serve` are deleted with DELETE /v1/sandboxes/ID'],
  ['start', 'environments start a fresh sandbox with `minisandbox run REF -- CMD` or `minisandbox shell REF`'],
  ['cp', 'give a run host files with `--mount type=bind,source=HOST,target=PATH`; the server has file routes (PUT/GET /v1/sandboxes/ID/files)'],
  ['commit', 'a served sandbox becomes an environment with POST /v1/sandboxes/ID/snapshot; builds make environments from recipes (`minisandbox build`)'],
  ['logs', 'a run streams its command output to the terminal; builds keep their logs under the store (the path is in `build --json`)'],
  ['login', 'registry credentials are read from the files podman and docker write (`podman login`, `docker login`); see README: Importing container images'],
  ['push', 'environments are published by `minisandbox build` and `minisandbox import`; `minisandbox copy` copies tags between registries'],
]);

/** Commands worth suggesting for a typo: only those one edit away (`pul` -> `pull`), never just similar. */
export function typoSuggestion(word: string, commands: readonly string[]): string | undefined {
  if (word.length < 3) return undefined;
  return commands.find((c) => editDistance(word, c) === 1);
}

function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++) {
      const sub = d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1);
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, sub);
      // a swap of neighbours is one edit (Damerau)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  return d[a.length]![b.length]!;
}

/** What to tell someone who typed a Docker verb minisandbox lacks; undefined for other words. */
export function dockerVerbAnswer(word: string): string | undefined {
  const a = DOCKER_VERBS.get(word);
  return a === undefined ? undefined : `minisandbox has no "${word}" command: ${a}`;
}

const isInteractiveFlag = (a: string): boolean => /^-(it|ti|i|t)$/.test(a) || a === '--interactive' || a === '--tty';

/**
 * `run`'s (or `shell`'s) arguments after the command word, rewritten: Docker's flags mapped to
 * ours and a `--` put after the ref when the command was given without one. Returns the command
 * word to use (`-it` makes a `run` a `shell`) and its arguments; throws InvalidInputError for a
 * Docker flag that has no equivalent, saying what to do.
 */
export function rewriteRunArgs(word: 'run' | 'shell', args: readonly string[]): { word: 'run' | 'shell'; args: string[] } {
  const out: string[] = [];
  let interactive = false;
  let i = 0;
  for (; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--') {
      // no ref before the `--`: leave it to commander's own error
      out.push(...args.slice(i));
      return { word: interactive ? 'shell' : word, args: out };
    }
    if (!a.startsWith('-') || a === '-') break;
    const name = a.includes('=') ? a.slice(0, a.indexOf('=')) : a;
    const refused = REFUSED_RUN_FLAGS.get(name);
    if (refused !== undefined) throw new InvalidInputError(`${word} ${name}: not a minisandbox option`, refused);
    if (a === '--rm') continue; // always so
    if (isInteractiveFlag(a)) {
      interactive = true;
      continue;
    }
    if (a === '-w') {
      out.push('--workdir', ...args.slice(i + 1, i + 2));
      i++;
      continue;
    }
    out.push(a);
    if (RUN_VALUE_OPTIONS.has(a) && i + 1 < args.length) out.push(args[++i]!);
  }
  const toShell = interactive && word === 'run';
  if (toShell) {
    for (let j = 0; j < out.length; j++) {
      const opt = out[j]!.includes('=') ? out[j]!.slice(0, out[j]!.indexOf('=')) : out[j]!;
      if (opt.startsWith('-') && !SHELL_VALUE_OPTIONS.has(opt))
        throw new InvalidInputError(`run -it ${opt}: an interactive shell does not take ${opt}`, 'give it to a plain `run REF -- CMD`, or leave it out');
      if (!out[j]!.includes('=')) j++;
    }
  }
  if (i >= args.length) return { word: toShell ? 'shell' : word, args: out };
  // the ref, then the command: taken as it is, options and all
  out.push(args[i]!);
  const rest = args.slice(i + 1);
  if (rest.length > 0) out.push(...(rest[0] === '--' ? rest : ['--', ...rest]));
  return { word: toShell ? 'shell' : word, args: out };
}

/**
 * A whole command line with the habits above applied: `run`/`shell` arguments rewritten, and an
 * unknown command word (or `help WORD`) answered with what to use instead. Throws
 * InvalidInputError (exit 2) for those; anything else is left to commander.
 */
export function applyDockerHabits(argv: readonly string[]): string[] {
  const i = commandIndex(argv);
  if (i < 0) return [...argv];
  const word = argv[i]!;
  if (word === 'run' || word === 'shell') {
    const r = rewriteRunArgs(word, argv.slice(i + 1));
    return [...argv.slice(0, i), r.word, ...r.args];
  }
  const asked = word === 'help' ? argv[i + 1] : word;
  if (asked === undefined || asked.startsWith('-') || COMMANDS.has(asked) || asked === 'help') return [...argv];
  const known = [...COMMANDS.keys()];
  const typo = typoSuggestion(asked, known);
  const answer = dockerVerbAnswer(asked);
  throw new InvalidInputError(
    answer ?? `unknown command "${asked}"`,
    answer !== undefined
      ? 'see `minisandbox --help` for every command'
      : typo !== undefined
        ? `did you mean \`${typo}\`?`
        : `the commands are: ${known.join(', ')}`,
  );
}
