/**
 * Reading an untrusted tree (a live sandbox's upper dir) one name at a time, relative to a held
 * directory fd, never through a symlink: the `*at` calls node lacks, made of its own by path.
 *
 * `/proc/<pid>/fd/<dirfd>/<name>` is openat(dirfd, name): the fd entry is a magic link the kernel
 * jumps through to the very directory the fd holds (not to its name: a directory renamed or
 * replaced by a symlink since it was opened is still the one read), and `name`, a single
 * component, is then looked up in it. lstat/readlink on that path do not follow `name`, and an
 * open with O_NOFOLLOW fails on a symlink (ELOOP), which is the whole of RESOLVE_NO_SYMLINKS for a
 * one-component walk; no `..` or `/` can be in a name a directory listing gave. Measured on this
 * kernel (6.18): a held dir renamed and replaced by a symlink to another dir is still read
 * through its fd; O_NOFOLLOW on a symlinked name gives ELOOP, O_DIRECTORY|O_NOFOLLOW ENOTDIR.
 * `/proc/<pid>` rather than `/proc/self`: one symlink less per call (about 1 µs of ~7 here), and
 * worker threads share the process's fd table, so the same paths work from them.
 */
import { closeSync, constants, fstatSync, openSync } from 'node:fs';

/** Neither a FIFO (which would block an open for reading until a writer came) nor a tty can hold an open. */
export const FILE_AT_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;
const DIR_AT_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/** `/proc/<pid>/fd/<fd>/` as bytes: prefix a single name with it to reach that name in the held directory. */
export function fdDirPrefix(fd: number): Buffer {
  return Buffer.from(`/proc/${process.pid}/fd/${fd}/`);
}

/** The path of the directory an fd holds (for readdir: it opens the same directory again). */
export function fdDirPath(fd: number): string {
  return `/proc/${process.pid}/fd/${fd}`;
}

/** Opens the directory `path` (its last component must not be a symlink); the caller trusts the path above it. */
export function openDirNoFollow(path: string | Buffer): number {
  return openSync(path, DIR_AT_FLAGS);
}

/** Opens the directory named `at` (a prefix from fdDirPrefix plus one name); a symlink there fails (ENOTDIR). */
export function openDirAt(at: Buffer): number {
  return openSync(at, DIR_AT_FLAGS);
}

export class NotTheFileError extends Error {
  readonly code = 'ESTALE';
}

/**
 * Opens the regular file named `at` for reading: a symlink there fails (ELOOP), and so does
 * anything that is not a regular file or, with `ino`, not the inode the caller saw in its lstat
 * (the name was swapped since), with NotTheFileError.
 */
export function openFileAt(at: Buffer | string, ino?: bigint): number {
  const fd = openSync(at, FILE_AT_FLAGS);
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw new NotTheFileError('no longer a regular file');
    if (ino !== undefined && st.ino !== ino) throw new NotTheFileError('replaced by another file');
    return fd;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}
