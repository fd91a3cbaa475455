/**
 * The test suite's shared Debian rootfs as a tarball beside it (made once per host, like the
 * rootfs): a directory base would be hashed whole by every command that loads the specs, a
 * tarball is read once to hash.
 */
import { execFile } from 'node:child_process';
import { existsSync, renameSync } from 'node:fs';
import { promisify } from 'node:util';
import { ensureDebianRootfs } from '../../src/sandbox/rootfs.js';
import { SHARED_FIXTURES_DIR } from './sandbox-testkit.js';

export async function debianTarball(): Promise<string> {
  const dir = await ensureDebianRootfs(SHARED_FIXTURES_DIR);
  const tar = `${dir}.tar`;
  if (existsSync(tar)) return tar;
  const tmp = `${tar}.tmp-${process.pid}`;
  await promisify(execFile)('tar', ['-C', dir, '--numeric-owner', '--xattrs', '--xattrs-include=*', '-cf', tmp, '.'], { maxBuffer: 16 << 20 });
  renameSync(tmp, tar);
  return tar;
}
