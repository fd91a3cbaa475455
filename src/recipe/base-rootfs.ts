/**
 * How each kind of base source becomes a root filesystem in an empty directory. The argv builders
 * are pure (the executor runs them where it likes, e.g. inside a user namespace); the busybox
 * base is small enough to lay out directly.
 */
import { execFile } from 'node:child_process';
import { chmod, copyFile, mkdir, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { HostCapabilityError, InvalidInputError } from '../errors.js';
import type { BaseSource } from './schema.js';

/** The command that fills `target` from a debootstrap, tarball or directory source. */
export function baseRootfsCommand(from: Exclude<BaseSource, { type: 'busybox' }>, target: string): string[] {
  switch (from.type) {
    case 'debootstrap':
      return [
        'debootstrap',
        `--variant=${from.variant}`,
        ...(from.include.length > 0 ? [`--include=${[...new Set(from.include)].sort().join(',')}`] : []),
        ...(from.arch !== undefined ? [`--arch=${from.arch}`] : []),
        from.suite,
        target,
        from.mirror,
      ];
    case 'tarball':
      // GNU tar detects gzip/xz/zstd itself when reading; ownership and xattrs are part of a rootfs.
      return ['tar', '-xpf', from.path, '-C', target, '--numeric-owner', '--xattrs', '--xattrs-include=*'];
    case 'directory':
      return ['cp', '-a', '--', `${from.path}/.`, `${target}/`];
  }
}

const ETC_FILES: Record<string, string> = {
  'etc/passwd': 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  'etc/group': 'root:x:0:\nnogroup:x:65534:\n',
  'etc/hosts': '127.0.0.1 localhost\n::1 localhost\n',
};

/**
 * A root filesystem of one static busybox: `/bin/busybox`, a symlink per applet (as
 * `busybox --list-full` places them), the usual top-level directories and minimal /etc.
 */
export async function populateBusyboxRoot(busybox: string, target: string): Promise<void> {
  let list: string;
  try {
    list = (await promisify(execFile)(busybox, ['--list-full'], { encoding: 'utf8' })).stdout;
  } catch (e) {
    throw new HostCapabilityError(
      `cannot run ${busybox} --list-full: ${(e as Error).message}`,
      'install Debian busybox-static (it provides /bin/busybox), or point the base recipe at a static busybox',
    );
  }
  const applets = list.split('\n').filter((l) => l !== '');
  if (applets.length === 0) throw new InvalidInputError(`${busybox} lists no applets`, 'use a busybox built with applet support');
  for (const d of ['bin', 'sbin', 'usr/bin', 'usr/sbin', 'etc', 'root', 'tmp', 'var/tmp', 'proc', 'sys', 'dev', 'home', 'run']) {
    await mkdir(join(target, d), { recursive: true });
  }
  await chmod(join(target, 'tmp'), 0o1777);
  await chmod(join(target, 'var/tmp'), 0o1777);
  await chmod(join(target, 'root'), 0o700);
  await copyFile(busybox, join(target, 'bin/busybox'));
  await chmod(join(target, 'bin/busybox'), 0o755);
  for (const a of applets) {
    if (a === 'bin/busybox' || a.includes('..') || a.startsWith('/')) continue;
    const link = join(target, a);
    await mkdir(dirname(link), { recursive: true });
    await symlink(relative(dirname(link), join(target, 'bin/busybox')), link).catch((e: unknown) => {
      if ((e as { code?: string }).code !== 'EEXIST') throw e;
    });
  }
  for (const [p, body] of Object.entries(ETC_FILES)) await writeFile(join(target, p), body, { mode: 0o644 });
}
