/**
 * Leftovers of killed imports and pulls: work dirs and files named `<prefix><pid>-...` by the
 * process that made them. The next run of the same command removes those whose process is dead,
 * and only those: a live pull's staging dir is never touched (gc removes whatever is left after
 * its grace period). A pid reused by an unrelated process keeps its leftovers until then: the
 * safe side.
 */
import { join } from 'node:path';
import { readdirOrEmpty } from '../util/fs.js';
import { pidAlive } from './lock.js';
import { type Owners, ownersFor, removeOwnedTree } from './owners.js';
import type { StorePaths } from './paths.js';

/** The pid a leftover's name starts with after `prefix`, or null when it is not one of these. */
export function leftoverPid(name: string, prefix: string): number | null {
  if (!name.startsWith(prefix)) return null;
  const m = /^(\d+)-/.exec(name.slice(prefix.length));
  return m === null ? null : Number(m[1]);
}

/** Removes the entries of `dir` named `<prefix><pid>-...` whose process is dead; returns how many. */
export async function removeDeadLeftovers(dir: string, prefixes: readonly string[], owners: Owners): Promise<number> {
  let n = 0;
  for (const name of await readdirOrEmpty(dir)) {
    for (const prefix of prefixes) {
      const pid = leftoverPid(name, prefix);
      if (pid === null || pid === process.pid || pidAlive(pid)) continue;
      await removeOwnedTree(owners, join(dir, name));
      n++;
      break;
    }
  }
  return n;
}

/** What killed pulls leave: staging dirs, pool links in flight, half laid-out trees, half-written files. */
export async function removePullLeftovers(store: StorePaths, idShift: number): Promise<number> {
  // files of a rootless lay-out belong to subordinate ids: removed through its user namespace
  const owners = await ownersFor(idShift);
  return (await removeDeadLeftovers(store.tmpDir, ['stage-', 'link-', 'w-'], owners)) + (await removeDeadLeftovers(store.layersDir, ['.tmp-'], owners));
}

/** What killed imports leave: their tarball's partial extraction. */
export async function removeImportLeftovers(store: StorePaths): Promise<number> {
  return removeDeadLeftovers(store.tmpDir, ['import-'], await ownersFor(0));
}
