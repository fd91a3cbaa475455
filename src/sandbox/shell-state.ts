/**
 * A session's shell state carried into another sandbox's session (a fork's children): its working
 * directory and its exported variables. Read from the shell itself: `$PWD`, and the environment a
 * command it starts inherits (`/proc/self/environ`: exactly what `export -p` lists, as raw
 * NUL-separated bytes, so no shell quoting has to be parsed back). Replayed as one script of
 * ANSI-C quoted assignments (session.ts' ansiQuote): no value is ever evaluated as shell code.
 */
import { MinisandboxError } from '../errors.js';
import { ansiQuote, type Session } from './session.js';

export interface ShellState {
  cwd: string;
  /** Exported variables, in the order the shell listed them. */
  env: Array<[string, string]>;
}

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** The shell's own bookkeeping (and bash's read-only variables): each shell sets these itself. */
const SHELL_OWN = new Set(['PWD', 'OLDPWD', 'SHLVL', '_', 'BASHOPTS', 'SHELLOPTS', 'BASH_VERSINFO', 'EUID', 'PPID', 'UID', 'BASH_ARGV0']);

export async function captureShellState(s: Session): Promise<ShellState> {
  const o = await s.run(`printf '%s\\0' "$PWD"; cat /proc/self/environ`, { timeoutMs: 30_000, maxOutputBytes: 16 << 20 });
  if (o.status !== 'ok' || o.exitCode !== 0)
    throw new MinisandboxError(
      'SANDBOX_FILE',
      `cannot read the session's cwd and variables (${o.status}, exit ${o.exitCode}): ${o.stderr.trim().slice(-300)}`,
      {
        hint: 'the session must be idle and its sandbox must have cat and /proc',
      },
    );
  const [cwd = '/', ...vars] = o.stdout.split('\0');
  const env: Array<[string, string]> = [];
  for (const v of vars) {
    const eq = v.indexOf('=');
    if (eq <= 0) continue;
    const name = v.slice(0, eq);
    if (NAME_RE.test(name) && !SHELL_OWN.has(name)) env.push([name, v.slice(eq + 1)]);
  }
  return { cwd, env };
}

/**
 * The script that gives a fresh shell `state`: variables the fresh shell has that `state` lacks
 * (among `baseNames`, the sandbox's configured ones) are unset, the rest exported, then the cd.
 */
export function restoreScript(state: ShellState, baseNames: Iterable<string>): string {
  const have = new Set(state.env.map(([k]) => k));
  const lines: string[] = [];
  for (const n of baseNames) if (NAME_RE.test(n) && !SHELL_OWN.has(n) && !have.has(n)) lines.push(`unset ${n}`);
  for (const [k, v] of state.env) lines.push(`export ${k}=${ansiQuote(v)}`);
  lines.push(`cd -- ${ansiQuote(state.cwd)}`);
  return lines.join('\n');
}

export async function restoreShellState(s: Session, state: ShellState, baseNames: Iterable<string>): Promise<void> {
  const o = await s.run(restoreScript(state, baseNames), { timeoutMs: 30_000 });
  if (o.status !== 'ok' || o.exitCode !== 0)
    throw new MinisandboxError(
      'SANDBOX_FILE',
      `cannot give the new session the parent session's state (${o.status}, exit ${o.exitCode}): ${o.stderr.trim().slice(-300)}`,
      {
        hint: "the parent session's working directory must exist in the child",
      },
    );
}
