/**
 * The store is private to its owner. Layers hold what their authors put there: setuid-root files,
 * device nodes, files of the sandboxes' ids. Reachable by other host users, any of them becomes
 * root (or a sandbox's uid) or writes to a device (issue 14). So, as Docker and containerd do with
 * their state directories, nobody else may traverse the store's root:
 *
 *   <store>/            0700: not even the sandboxes' root uid passes (issue 25: a host process
 *                       of that uid ran a layer's setuid-root file through the search ACL it once
 *                       had). The holder reaches its sandbox dir and its lower dirs from before it
 *                       takes the sandbox's ids (native/sandbox-launch.c work_from_sandbox_dir,
 *                       open_lowers), so only the sandboxes' own mount namespaces reach layer files
 *                       as that uid
 *   layers/ sandboxes/  0711 (inside a root no one else passes)
 *   everything else     0700: only the owner (and its lay-out helper) ever reads it
 *
 * The root is made with mode 0700 by its first mkdir (never a wider window), and checked on every
 * command that touches the store: a store of our own with looser modes (one made before this
 * rule) is fixed in place, its old search ACL removed; someone else's is refused with a hint.
 */
import { lstatSync, type Stats, statSync } from 'node:fs';
import { chmod, lstat, mkdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { MinisandboxError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import type { StorePaths } from './paths.js';

/** Subdirectories the sandboxes' ids must walk through. */
const SEARCHABLE = ['layers', 'sandboxes'];
/** Subdirectories only the owner reads (created here so that none starts wider). */
const OWNER_ONLY = ['links', 'manifests', 'indexes', 'envs', 'refs', 'leases', 'tmp', 'logs', 'locks'];

/** The store's root is someone else's and lets others in: we may not fix it. */
export class StoreNotPrivateError extends MinisandboxError {
  constructor(root: string, why: string, hint: string) {
    super('STORE_NOT_PRIVATE', `store ${root} ${why}`, { hint });
  }
}

const prepared = new WeakMap<StorePaths, Promise<void>>();

/** Makes (or checks and fixes) the store's modes, once per StorePaths in this process. */
export function ensurePrivateStore(store: StorePaths, warn: (message: string) => void = defaultWarn): Promise<void> {
  let p = prepared.get(store);
  if (p === undefined) {
    p = makePrivate(store.root, warn);
    prepared.set(store, p);
    p.catch(() => prepared.delete(store));
  }
  return p;
}

function defaultWarn(message: string): void {
  process.emitWarning(message, 'MinisandboxWarning');
}

async function makePrivate(root: string, warn: (message: string) => void): Promise<void> {
  // Checked with sync calls: on a store that is already right (every command but the first) this is
  // a dozen stats, each cheaper than the round trip through libuv's thread pool an async one makes.
  let st = statOrUndefined(root);
  if (st === undefined) {
    await mkdir(dirname(root), { recursive: true });
    try {
      await mkdir(root, { mode: 0o700 });
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) throw e;
    }
    st = await stat(root);
  }
  if (!st.isDirectory()) throw new StoreNotPrivateError(root, 'is not a directory', 'pass --store a directory (or a path that does not exist yet)');
  const me = process.getuid?.() ?? 0;
  if (st.uid !== me) {
    // Someone else's store (root included) is its owner's to fix: its ACL names the owner's
    // sandbox ids, not ours. Used as it is when private, refused when open.
    const mode = st.mode & 0o777;
    if (mode !== 0o700 && mode !== 0o710 && mode !== 0o711) {
      throw new StoreNotPrivateError(
        root,
        `belongs to uid ${st.uid} and is open to others (mode ${mode.toString(8)})`,
        `use a store of your own (--store), or have its owner run a minisandbox command on it once (which makes it private), or \`chmod 700 ${root}\``,
      );
    }
    return;
  }
  const rootMode = st.mode & 0o7777;
  if (rootMode !== 0o700) {
    await chmod(root, 0o700);
    // 0710: the sandboxes' root uid's search ACL (its mask shows in the group bits); 0711 where the
    // file system had no ACLs. Both were this code's own, so only a wider mode is worth a warning.
    if (rootMode === 0o710) await dropAcl(root);
    else if (rootMode !== 0o711 && (rootMode & 0o077) !== 0)
      warn(`store ${root} was open to other users (mode ${rootMode.toString(8)}); made it private (see README: Store)`);
  }
  for (const d of [...SEARCHABLE, ...OWNER_ONLY]) {
    const want = SEARCHABLE.includes(d) ? 0o711 : 0o700;
    const p = join(root, d);
    let s = lstatOrUndefined(p);
    if (s === undefined) {
      try {
        await mkdir(p, { mode: want });
        continue;
      } catch (e) {
        if (!isErrno(e, 'EEXIST')) throw e;
      }
      s = await lstat(p);
    }
    if (s.isDirectory() && (s.mode & 0o7777) !== want && (s.uid === me || me === 0)) await chmod(p, want);
  }
}

function statOrUndefined(p: string): Stats | undefined {
  try {
    return statSync(p);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return undefined;
    throw e;
  }
}

function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return undefined;
    throw e;
  }
}

/**
 * A POSIX ACL (system.posix_acl_access, format of linux/posix_acl_xattr.h) of the owner's, group's
 * and others' entries only, from the mode bits. Setting it removes any other entry, and the kernel
 * then drops the xattr altogether, since such an ACL says no more than the mode.
 */
export function modeOnlyAcl(mode: number): Buffer {
  const entries: Array<[tag: number, perm: number]> = [
    [0x01, (mode >> 6) & 7], // ACL_USER_OBJ
    [0x04, (mode >> 3) & 7], // ACL_GROUP_OBJ
    [0x20, mode & 7], // ACL_OTHER
  ];
  const b = Buffer.alloc(4 + 8 * entries.length);
  b.writeUInt32LE(2, 0);
  entries.forEach(([tag, perm], i) => {
    b.writeUInt16LE(tag, 4 + 8 * i);
    b.writeUInt16LE(perm, 6 + 8 * i);
    b.writeUInt32LE(0xffffffff, 8 + 8 * i);
  });
  return b;
}

/** Removes the search ACL earlier code gave the sandboxes' root uid (the chmod to 0700 masked it already). */
async function dropAcl(root: string): Promise<void> {
  const { FsmetaStream } = await import('./fsmeta.js'); // the helper's module is large; most checks never need it
  const helper = await FsmetaStream.start(root);
  helper.setxattr(root, 'system.posix_acl_access', modeOnlyAcl(0o700));
  try {
    await helper.close();
  } catch (e) {
    // no ACLs here after all: nothing to remove
    if (!/Operation not supported|EOPNOTSUPP/.test(String(e))) throw e;
  }
}
