/**
 * The shell script a build sandbox runs for an env or instance recipe. Pure: the executor stages
 * copied-in files (see `stagedFiles`) at `stagingMount` inside the sandbox and runs
 * `<shell> -c <script>` as root. Files are copied from inside the sandbox, on the merged view,
 * because writing them into the upper directory from outside would turn a lower layer's symlinked
 * directory (Debian's /lib -> usr/lib) into a real one.
 *
 * Each command runs in its own `<shell> -c` (as Dockerfile RUN lines do: `cd` does not leak); the
 * first failure stops the script with that command's exit status and a line naming it.
 */
import type { NormalizedRecipe } from './normalize.js';
import type { EnvRecipe, InstanceRecipe } from './schema.js';

type NormalizedEnv = Extract<NormalizedRecipe, { kind: 'env' }>;

export function shQuote(s: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s)) return s;
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** Staging names for an env's files: copy `src` (host) to `<staging dir>/<name>` before the build. */
export function stagedFiles(recipe: EnvRecipe): Array<{ src: string; name: string }> {
  return recipe.files.map((f, i) => ({ src: f.src, name: String(i) }));
}

/** `+ [i/n] cmd` before each command on stderr, and a failure line after a failing one. */
function runCommands(shell: string, commands: readonly string[]): string[] {
  const n = commands.length;
  return commands.flatMap((c, i) => {
    const tag = `[${i + 1}/${n}]`;
    return [
      `printf '%s\\n' ${shQuote(`+ ${tag} ${c}`)} >&2`,
      `${shQuote(shell)} -c ${shQuote(c)} || { rc=$?; printf '%s\\n' ${shQuote(`minisandbox: command ${tag} failed`)}" with exit status $rc" >&2; exit $rc; }`,
    ];
  });
}

function exports(env: Record<string, string>): string[] {
  return Object.entries(env).map(([k, v]) => `export ${k}=${shQuote(v)}`);
}

/**
 * Modes come from the normalized recipe, which holds the source's own mode when the recipe gave
 * none. `env` is what the commands see: pass effectiveEnv (lower recipes' variables too) from the plan.
 */
export function envBuildScript(recipe: EnvRecipe, normalized: NormalizedEnv, stagingMount: string, env: Record<string, string> = recipe.env): string {
  const copies = recipe.files.flatMap((f, i) => {
    const dest = shQuote(f.dest);
    const mode = normalized.files[i]?.mode ?? f.mode;
    return [
      `mkdir -p "$(dirname ${dest})"`,
      `rm -rf ${dest}`,
      `cp -R ${shQuote(`${stagingMount}/${i}`)} ${dest}`,
      ...(mode === undefined ? [] : [`chmod ${mode.toString(8).padStart(4, '0')} ${dest}`]),
    ];
  });
  return [
    'set -e',
    ...exports(env),
    ...copies,
    `mkdir -p ${shQuote(recipe.workdir)}`,
    `cd ${shQuote(recipe.workdir)}`,
    'set +e',
    ...runCommands(recipe.shell, recipe.commands),
    'exit 0',
    '',
  ].join('\n');
}

/** Post-checkout commands in the workdir (the checkout itself is `checkoutAtCommit`, on the host). */
export function instanceBuildScript(recipe: InstanceRecipe, env: Record<string, string> = recipe.env): string {
  return ['set -e', ...exports(env), `cd ${shQuote(recipe.workdir)}`, 'set +e', ...runCommands(recipe.shell, recipe.commands), 'exit 0', ''].join('\n');
}
