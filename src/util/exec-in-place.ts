/**
 * Replacing this node process with another program (execve), through the native/exec-in-place.c
 * addon: Node 20 has no process.execve. The CLI's one-shot run uses it to leave the sandbox to the
 * launcher instead of forking it and waiting (sandbox/run-in-place.ts).
 */
import { BEFORE_EXEC } from './before-exec.js';
import { nativeAddon } from './native.js';

export type ExecInPlace = (file: string, argv: string[], env: Record<string, string>) => never;

type RawExecve = (file: string, argv: string[], env: string[]) => void;

function isRawExecve(f: unknown): f is RawExecve {
  return typeof f === 'function';
}

/** execve for this process, or undefined where the addon cannot be built here (the caller spawns instead). */
export async function loadExecInPlace(): Promise<ExecInPlace | undefined> {
  const path = await nativeAddon('exec-in-place');
  if (path === undefined) return undefined;
  const module: { exports: { execve?: unknown } } = { exports: {} };
  try {
    process.dlopen(module, path);
  } catch {
    // built but not loadable here (a noexec mount, say): the caller spawns instead, as without it
    return undefined;
  }
  const execve = module.exports.execve;
  if (!isRawExecve(execve)) throw new Error(`${path} is not the exec-in-place addon`);
  return (file, argv, env) => {
    (process as NodeJS.EventEmitter).emit(BEFORE_EXEC);
    execve(
      file,
      argv,
      Object.entries(env).map(([k, v]) => `${k}=${v}`),
    );
    // execve returns only by throwing
    throw new Error(`exec of ${file} returned`);
  };
}
