/**
 * Small file systems a test makes and removes itself: a loop-mounted ext4 (block size of the
 * test's choosing, to meet ext4's own limits) or a size-capped tmpfs (to fill a disk in a few
 * MiB). Both need root; `smallFsUnavailable` says why not, for `it.skipIf` with a reason.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** Why this host cannot mount a test file system, or undefined when it can. */
export function smallFsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'mounting a file system needs root';
  if (spawnSync('mkfs.ext4', ['-V'], { stdio: 'ignore' }).error !== undefined) return 'mkfs.ext4 (e2fsprogs) is not installed';
  return undefined;
}

export interface SmallFs {
  dir: string;
  /** Unmounts (the loop device goes with it) and removes the mount point and image. */
  remove(): void;
}

/** A fresh ext4 of `mib` MiB with `blockSize`-byte blocks (mkfs's defaults otherwise) mounted at `dir`. */
export function mountExt4(dir: string, mib: number, blockSize = 4096): SmallFs {
  // a new image file each time: a loop device that served an older one may still cache its blocks
  const image = join(dirname(dir), `${dir.split('/').pop()}.ext4`);
  execFileSync('truncate', ['-s', `${mib}M`, image]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-b', String(blockSize), image], { stdio: 'ignore' });
  mkdirSync(dir, { recursive: true });
  execFileSync('mount', ['-o', 'loop', image, dir]);
  return { dir, remove: () => unmount(dir, image) };
}

/** A tmpfs of `bytes` mounted at `dir`. */
export function mountTmpfs(dir: string, bytes: number): SmallFs {
  mkdirSync(dir, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes},mode=0755`, 'tmpfs', dir]);
  return { dir, remove: () => unmount(dir) };
}

function unmount(dir: string, image?: string): void {
  // lazily when still busy: a failed test may hold a file open in it
  if (spawnSync('umount', [dir], { stdio: 'ignore' }).status !== 0) spawnSync('umount', ['-l', dir], { stdio: 'ignore' });
  rmSync(dir, { recursive: true, force: true });
  if (image !== undefined) rmSync(image, { force: true });
}
