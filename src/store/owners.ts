/**
 * Who may give laid-out files their owners. Root chowns to any id directly. An unprivileged user
 * cannot chown at all, yet a layer laid out for its rootless sandboxes must be owned by its
 * subordinate ids (base + in-sandbox id, see ARCHITECTURE.md): so its lay-out helper, and the removal and
 * reading of such trees, run as root of the user namespace of host/userns.ts, where chown to
 * in-sandbox ids is allowed and the store's own directories stay writable.
 */
import { spawn } from 'node:child_process';
import { HostCapabilityError, InvalidInputError } from '../errors.js';
import { type IdMap, resolveIdMap } from '../host/subid.js';
import { asSubordinateRoot, removeTreeAs } from '../host/userns.js';

/**
 * direct: chown to the ids given (root). subordinate: through the user namespace described above.
 * self: files become the caller's, as `tar -x` makes them for a user (an unprivileged export);
 * with an id map, still through that user namespace, which can read what the subordinate ids own
 * in the same store.
 */
export type Owners = { kind: 'direct' } | { kind: 'subordinate'; idMap: IdMap } | { kind: 'self'; idMap?: IdMap };

export const DIRECT_OWNERS: Owners = { kind: 'direct' };

/** How this process can lay out files owned by `idShift` + their recorded ids. */
export async function ownersFor(idShift: number): Promise<Owners> {
  if (process.getuid?.() === 0) return DIRECT_OWNERS;
  if (idShift === 0) {
    const idMap = await resolveIdMap().catch(() => undefined);
    return idMap === undefined ? { kind: 'self' } : { kind: 'self', idMap };
  }
  const idMap = await resolveIdMap();
  if (idMap.uidStart !== idShift || idMap.gidStart !== idShift) {
    throw new HostCapabilityError(
      `an unprivileged user can lay out layers only for its own subordinate range (uids ` +
        `from ${idMap.uidStart}, gids from ${idMap.gidStart}), not for id shift ${idShift}`,
      'pull with `--id-shift auto`, or as root',
    );
  }
  return { kind: 'subordinate', idMap };
}

/** The owner to pass to chown for host ids `uid`/`gid` (translated into the user namespace); null: no chown. */
export function chownIds(owners: Owners, uid: number, gid: number): [number, number] | null {
  if (owners.kind === 'direct') return [uid, gid];
  // the caller's own ids sit at COUNT in the user namespace
  if (owners.kind === 'self') return owners.idMap === undefined ? null : [owners.idMap.count, owners.idMap.count];
  const { uidStart, gidStart, count } = owners.idMap;
  const u = uid - uidStart;
  const g = gid - gidStart;
  if (u < 0 || u >= count || g < 0 || g >= count) {
    throw new InvalidInputError(
      `owner ${uid - uidStart}:${gid - gidStart} is outside the ${count} ids a rootless sandbox maps`,
      'give this user a larger subordinate range (/etc/subuid, /etc/subgid), or pull as root',
    );
  }
  return [u, g];
}

/** Whether these owners act through the user namespace (and so can touch subordinate-owned files). */
export function inUserNamespace(owners: Owners): boolean {
  return owners.kind !== 'direct' && owners.idMap !== undefined;
}

/** `argv` as it must be spawned to act with these owners' rights. */
export async function commandAs(owners: Owners, argv: readonly string[]): Promise<string[]> {
  return owners.kind === 'direct' || owners.idMap === undefined ? [...argv] : asSubordinateRoot(owners.idMap, argv);
}

/** Removes a tree that may hold files owned by the subordinate ids. */
export function removeOwnedTree(owners: Owners, path: string): Promise<void> {
  return removeTreeAs(owners.kind === 'direct' ? undefined : owners.idMap, path);
}

/**
 * sha256 (hex) of each file, read with these owners' rights (for files this process may not read:
 * a rootless store's 0600 files and 0700 dirs belong to subordinate ids). null: unreadable.
 */
export async function sha256FilesAs(owners: Owners, paths: readonly Buffer[]): Promise<Array<string | null>> {
  if (paths.length === 0) return [];
  // -z: NUL-terminated records and no escaping of names, so any file name comes back as given
  const [cmd, ...args] = await commandAs(owners, ['xargs', '-0', '-r', 'sha256sum', '-z', '--']);
  const out = await new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    const p = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'ignore'] });
    p.stdout.on('data', (d: Buffer) => chunks.push(d));
    p.on('error', reject);
    p.on('close', () => resolve(Buffer.concat(chunks)));
    p.stdin.on('error', () => undefined);
    p.stdin.end(Buffer.concat(paths.flatMap((q) => [q, Buffer.of(0)])));
  });
  const byName = new Map<string, string>();
  for (let i = 0; i < out.length; ) {
    let end = out.indexOf(0, i);
    if (end < 0) end = out.length;
    const rec = out.subarray(i, end);
    // "<64 hex>  <name>" (two spaces: text mode)
    if (rec.length > 66) byName.set(rec.subarray(66).toString('latin1'), rec.subarray(0, 64).toString('latin1'));
    i = end + 1;
  }
  return paths.map((q) => byName.get(q.toString('latin1')) ?? null);
}

/**
 * Xattrs a lay-out with these owners can set: a user's own files take only `user.*` ones
 * (`security.capability` and `trusted.*` need privilege, which such a tree does not carry).
 */
export function keepsXattr(owners: Owners, name: string): boolean {
  return owners.kind !== 'self' || name.startsWith('user.');
}

/** For store-wide work (gc, verify): a non-root user's store holds trees of its subordinate ids. */
export async function storeOwners(): Promise<Owners> {
  if (process.getuid?.() === 0) return DIRECT_OWNERS;
  try {
    return { kind: 'subordinate', idMap: await resolveIdMap() };
  } catch {
    // no subordinate range: nothing in this store can belong to one
    return DIRECT_OWNERS;
  }
}
