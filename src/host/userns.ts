/**
 * Acting on files owned by a sandbox's subordinate ids. An unprivileged user may not touch files
 * its rootless sandboxes own (0600 files, 0700 dirs of subordinate ids), yet it must lay such
 * trees out, read them and remove them. Here a program runs as root of a user namespace that maps
 * the subordinate range at 0 and the user's own ids at COUNT (native/sandbox-launch.c `userns`),
 * so it may touch both those files and the user's own directories around them; never host root.
 */
import { spawn } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { HostCapabilityError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { nativeHelper } from '../util/native.js';
import type { IdMap } from './subid.js';

/** `argv` run as root of that user namespace. */
export async function asSubordinateRoot(idMap: IdMap, argv: readonly string[]): Promise<string[]> {
  const { uidStart, gidStart, count } = idMap;
  return [await nativeHelper('sandbox-launch'), 'userns', '--uid-map', `${uidStart}:${count}`, '--gid-map', `${gidStart}:${count}`, '--', ...argv];
}

/**
 * `argv` run as root of a user namespace mapping the caller's own ids at 0 and `idMap`'s range at
 * 1..COUNT (sandbox-launch `userns --self-first 1`): what it makes is the caller's, as if it ran
 * unwrapped, yet it may read every file of the range whatever its mode. Host id `start + k`
 * appears there as `k + 1`.
 */
export async function asSelfOverRange(idMap: IdMap, argv: readonly string[]): Promise<string[]> {
  const { uidStart, gidStart, count } = idMap;
  return [
    await nativeHelper('sandbox-launch'),
    'userns',
    '--uid-map',
    `${uidStart}:${count}`,
    '--gid-map',
    `${gidStart}:${count}`,
    '--self-first',
    '1',
    '--',
    ...argv,
  ];
}

/** Removes a tree; what this user may not delete (files of `idMap`'s ids) goes through the user namespace. */
export async function removeTreeAs(idMap: IdMap | undefined, path: string): Promise<void> {
  try {
    await rm(path, { recursive: true, force: true, maxRetries: 3 });
    return;
  } catch (e) {
    if (idMap === undefined || !(isErrno(e, 'EACCES') || isErrno(e, 'EPERM'))) throw e;
  }
  const [cmd, ...args] = await asSubordinateRoot(idMap, ['rm', '-rf', '--', path]);
  const err = await new Promise<string>((resolve, reject) => {
    let stderr = '';
    const p = spawn(cmd!, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    p.stderr.on('data', (d: Buffer) => void (stderr.length < 4096 && (stderr += d.toString())));
    p.on('error', reject);
    p.on('close', (code) => resolve(code === 0 ? '' : stderr.trim() || `exit ${String(code)}`));
  });
  if (err !== '') throw new HostCapabilityError(`cannot remove ${path}: ${err}`, 'check the subordinate id ranges of this user (/etc/subuid, /etc/subgid)');
}
