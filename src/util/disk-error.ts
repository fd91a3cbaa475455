/**
 * A write that failed for its disk, not for its data: full (ENOSPC), over quota (EDQUOT) or
 * failing (EIO). Node names no path for a failed `write` on an open file, so the layer that knows
 * what it was writing turns the errno error into one that names it and whose disk it is, and a
 * caller up the stack (verify, an import) can tell it from a bad pack or a bad image.
 */
import { MinisandboxError } from '../errors.js';

const STATES = { ENOSPC: 'is full', EDQUOT: 'is over its quota', EIO: 'failed (I/O error)' } as const;
type DiskCode = keyof typeof STATES;

export class DiskError extends MinisandboxError {
  constructor(
    /** Whose disk: "the store's", "the registry's". */
    readonly whose: string,
    /** The file or directory being written. */
    readonly path: string,
    readonly errno: DiskCode,
    cause: Error,
  ) {
    super('LOCAL_DISK', `${whose} disk ${STATES[errno]} at ${path} (${cause.message})`, {
      hint:
        errno === 'EIO'
          ? `the disk under ${path} reports I/O errors: check it (dmesg) before trusting what is on it`
          : `free space on the file system of ${path} (df ${path}) or move it to a larger one, then run it again (nothing half-written was published)`,
      cause,
    });
  }
}

/** The errno code of `e` when it is a disk's failure, else undefined. */
export function diskErrno(e: unknown): DiskCode | undefined {
  const code = typeof e === 'object' && e !== null ? (e as { code?: unknown }).code : undefined;
  return typeof code === 'string' && Object.hasOwn(STATES, code) ? (code as DiskCode) : undefined;
}

/**
 * `e` as a DiskError of `whose` disk when it is a disk's failure (naming the path node gives, the
 * destination of a copy or rename first, else `where`); anything else unchanged.
 */
export function asDiskError(e: unknown, whose: string, where: string): unknown {
  const errno = diskErrno(e);
  if (errno === undefined || e instanceof MinisandboxError || !(e instanceof Error)) return e;
  const x = e as NodeJS.ErrnoException & { dest?: unknown };
  const path = typeof x.dest === 'string' ? x.dest : typeof x.path === 'string' ? x.path : where;
  return new DiskError(whose, path, errno, e);
}

/** Runs `op`, turning a disk's failure into a DiskError of `whose` disk at `where`. */
export async function namingDisk<T>(whose: string, where: string, op: () => Promise<T>): Promise<T> {
  try {
    return await op();
  } catch (e) {
    throw asDiskError(e, whose, where);
  }
}
