/**
 * Host paths bind-mounted into a sandbox (`--mount type=bind,...`, `-v HOST:PATH`, the server's
 * `mounts`): the option's schema, the checks a target must pass, and the one resolution of a
 * source on the host (its real path, so the launcher can refuse any symlink swapped in since;
 * see native/sandbox-launch-binds.c, which mounts them and checks targets again).
 */
import { realpathSync, statSync } from 'node:fs';
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';

export const BindMountSchema = z.strictObject({
  /** A host directory or regular file. */
  source: z.string().min(1),
  /** Where it shows in the sandbox (absolute, no `.` or `..`, not `/`, `/proc`, `/dev`, `/sys`); see checkBindTargets. */
  target: z.string(),
  /** Unset: read-only unless the caller owns the source. */
  readonly: z.boolean().optional(),
  /**
   * The source as it is, never through a symlink (one on its path is refused): for a source
   * another party checked already, as the server checks it against its allowed dirs.
   */
  noSymlinks: z.boolean().optional(),
});
export type BindMount = z.infer<typeof BindMountSchema>;

/** A mount whose source is resolved on the host and whose access is decided. */
export interface ResolvedBindMount {
  source: string;
  target: string;
  readonly: boolean;
}

/** Why `target` is refused as a mount point, or undefined if it is fine (the launcher's rules). */
export function bindTargetProblem(target: string): string | undefined {
  if (!target.startsWith('/')) return 'not an absolute path';
  if (target === '/') return "the sandbox's root cannot be a mount point";
  if (target.includes('\0')) return 'a NUL byte';
  if (target.length >= 4096) return 'too long';
  const parts = target.slice(1).split('/');
  if (parts.some((p) => p === '' || p === '.' || p === '..')) return 'empty, "." and ".." components are refused';
  if (['proc', 'dev', 'sys'].includes(parts[0]!)) return "/proc, /dev and /sys are the sandbox's own";
  return undefined;
}

/** Targets are well-formed and none is inside another; else InvalidInputError naming them. */
export function checkBindTargets(mounts: readonly Pick<BindMount, 'target'>[]): void {
  for (const [i, m] of mounts.entries()) {
    const why = bindTargetProblem(m.target);
    if (why !== undefined)
      throw new InvalidInputError(`mount target ${JSON.stringify(m.target)}: ${why}`, 'give an absolute path inside the sandbox, e.g. /data');
    for (const other of mounts.slice(0, i)) {
      const [a, b] = m.target.length <= other.target.length ? [m.target, other.target] : [other.target, m.target];
      if (b === a || b.startsWith(`${a}/`))
        throw new InvalidInputError(`mount targets ${other.target} and ${m.target}: one is inside the other`, 'mount each host path at its own place');
    }
  }
}

/**
 * Each source's real path, checked to be a directory or regular file; read-only where asked, or,
 * where nothing was asked, unless `callerUid` owns the source.
 */
export function resolveBindMounts(mounts: readonly BindMount[], callerUid: number): ResolvedBindMount[] {
  checkBindTargets(mounts);
  return mounts.map((m) => {
    let source: string;
    if (!m.source.startsWith('/')) throw new InvalidInputError(`mount source ${JSON.stringify(m.source)}: not an absolute path`, 'give the host path from /');
    try {
      source = realpathSync(m.source);
    } catch (e) {
      throw new InvalidInputError(`mount source ${m.source}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, 'give an existing host directory or file');
    }
    if (m.noSymlinks === true && source !== m.source)
      throw new InvalidInputError(`mount source ${m.source}: a symlink on its path (it leads to ${source})`, 'give the path itself, without symlinks');
    const st = statSync(source);
    if (!st.isDirectory() && !st.isFile())
      throw new InvalidInputError(`mount source ${m.source}: neither a directory nor a regular file`, 'mount a directory or a regular file');
    return { source, target: m.target, readonly: m.readonly ?? st.uid !== callerUid };
  });
}

/** The launcher's arguments for them (read-only unless `--bind-readonly 0`). */
export function bindArgs(mounts: readonly ResolvedBindMount[]): string[] {
  return mounts.flatMap((m) => ['--bind-source', m.source, '--bind-target', m.target, '--bind-readonly', m.readonly ? '1' : '0']);
}
