/**
 * Root filesystems for tests and benchmarks: a busybox tree, a cached debootstrap tree, and the
 * ownership-shifted copy a user namespace needs (what the store's lay-out does for real layers).
 */
import { type ExecFileOptions, execFile } from 'node:child_process';
import { access, chmod, copyFile, lchown, lstat, mkdir, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { HostCapabilityError } from '../errors.js';
import type { IdMap } from '../host/subid.js';

/** execFile, promisified when called: at load it would load node:child_process for every importer (the run path's too). */
function run(file: string, args: string[], opts: ExecFileOptions = {}): Promise<{ stdout: string; stderr: string }> {
  return promisify(execFile)(file, args, { ...opts, encoding: 'utf8' });
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}

/** A minimal rootfs: static busybox with its applets as symlinks, /etc/passwd, empty mount points. */
export async function makeBusyboxRootfs(dir: string, busybox = '/bin/busybox'): Promise<string> {
  if (!(await exists(busybox))) throw new HostCapabilityError(`${busybox} not found`, 'install it: `apt-get install busybox-static`');
  for (const d of ['bin', 'etc', 'tmp', 'proc', 'dev', 'root', 'work']) await mkdir(join(dir, d), { recursive: true });
  await chmod(dir, 0o755);
  await chmod(join(dir, 'tmp'), 0o1777);
  await copyFile(busybox, join(dir, 'bin/busybox'));
  await chmod(join(dir, 'bin/busybox'), 0o755);
  const { stdout } = await run(busybox, ['--list']);
  for (const applet of stdout.split('\n')) {
    if (applet === '' || applet === 'busybox') continue;
    await symlink('busybox', join(dir, 'bin', applet)).catch(() => undefined);
  }
  await writeFile(join(dir, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n');
  await writeFile(join(dir, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  return dir;
}

/**
 * A `debootstrap --variant=minbase bookworm` tree (with git) under `cacheDir`, built once (~35 s,
 * needs Debian's mirror) and reused; the build goes to a temp name and is renamed into place.
 */
export async function ensureDebianRootfs(cacheDir: string, opts: { include?: string[]; mirror?: string } = {}): Promise<string> {
  const include = opts.include ?? ['git', 'gpgv', 'ca-certificates'];
  const dir = join(cacheDir, `debian-bookworm-minbase-${include.join('+')}`);
  if (await exists(join(dir, 'etc/debian_version'))) return dir;
  await mkdir(cacheDir, { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  try {
    await run('debootstrap', ['--variant=minbase', `--include=${include.join(',')}`, 'bookworm', tmp, opts.mirror ?? 'http://deb.debian.org/debian'], {
      maxBuffer: 64 << 20,
    });
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw new HostCapabilityError(
      `debootstrap failed: ${String(e).slice(0, 500)}`,
      'install debootstrap (`apt-get install debootstrap`) and make sure deb.debian.org is reachable',
    );
  }
  try {
    await rename(tmp, dir);
  } catch {
    // another process finished first; its tree is as good as ours
    await rm(tmp, { recursive: true, force: true });
  }
  return dir;
}

/**
 * Copies a tree with every owner shifted by the id map (uid u -> uidStart + u), as a sandbox's
 * user namespace needs. Root only. Marks completion with `.msb-shifted` so reruns are free.
 */
export async function shiftCopyTree(src: string, dst: string, idMap: IdMap): Promise<string> {
  const marker = join(dst, '.msb-shifted');
  if (await exists(marker)) return dst;
  const tmp = `${dst}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  // The parent may not exist yet (a fresh checkout's .cache/sandbox).
  await mkdir(dirname(dst), { recursive: true });
  await run('cp', ['-a', '--reflink=auto', src, tmp]);
  await shiftOwners(tmp, idMap);
  await writeFile(join(tmp, '.msb-shifted'), '');
  await lchown(join(tmp, '.msb-shifted'), idMap.uidStart, idMap.gidStart);
  try {
    await rename(tmp, dst);
  } catch {
    await rm(tmp, { recursive: true, force: true });
  }
  return dst;
}

/** Shifts owners in place (uid u -> uidStart + u) for every entry under root, root included. */
export async function shiftOwners(root: string, idMap: IdMap): Promise<void> {
  const walk = async (p: string): Promise<void> => {
    const st = await lstat(p);
    if (st.uid < idMap.count && st.gid < idMap.count) {
      await lchown(p, idMap.uidStart + st.uid, idMap.gidStart + st.gid);
      // chown clears setuid/setgid bits; restore them so the tree stays faithful.
      if (!st.isSymbolicLink() && (st.mode & 0o6000) !== 0) await chmod(p, st.mode & 0o7777);
    }
    if (st.isDirectory()) for (const n of await readdir(p)) await walk(join(p, n));
  };
  await walk(root);
}
