/**
 * Leftovers of killed commands: the work dirs and files a process names after itself in the
 * store's tmp and layers dirs (see util/owned-name.ts) while it pulls, imports, pushes (a snapshot
 * of `serve` is a push), copies, discards a build's upper or spools a tar upload. Whoever next
 * pulls, imports, runs `gc` or starts `serve` on the store removes every one whose owner is dead
 * (its pid gone, or taken by a process that started later), and only those: a live process's work
 * is never touched. What names no owner is left to `gc`, after its grace period.
 */
import { join } from 'node:path';
import { readdirOrEmpty } from '../util/fs.js';
import { ownerGone, ownerOfName } from '../util/owned-name.js';
import { type Owners, ownersFor, removeOwnedTree } from './owners.js';
import type { StorePaths } from './paths.js';

/** What the store's commands name after their process in its tmp dir. */
const TMP_PREFIXES = ['stage-', 'link-', 'w-', 'import-', 'image-', 'push-', 'copy-', 'trash-', 'tar-upload-', 'upload-'] as const;
/** ... and in its layers dir: half laid-out trees. */
const LAYER_PREFIXES = ['.tmp-'] as const;

/** Removes the entries of `dir` named after a dead owner with one of `prefixes`; returns how many. */
async function removeDeadIn(dir: string, prefixes: readonly string[], owners: Owners): Promise<number> {
  let n = 0;
  for (const name of await readdirOrEmpty(dir)) {
    const owner = prefixes.map((p) => ownerOfName(name, p)).find((o) => o !== null);
    if (owner === undefined || !ownerGone(owner)) continue;
    await removeOwnedTree(owners, join(dir, name));
    n++;
  }
  return n;
}

/**
 * Removes every leftover of a dead process in the store; returns how many. Files of a rootless
 * lay-out belong to subordinate ids: they go through the user's namespace (removeOwnedTree).
 */
export async function removeDeadLeftovers(store: StorePaths): Promise<number> {
  const owners = await ownersFor(0);
  return (await removeDeadIn(store.tmpDir, TMP_PREFIXES, owners)) + (await removeDeadIn(store.layersDir, LAYER_PREFIXES, owners));
}
