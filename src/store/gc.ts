/**
 * Store garbage collection. Roots: the envs of the store's refs and the layers leased by live
 * sandboxes. Everything else older than the grace period goes: unreached layer trees, their
 * manifests, pool inodes no layer links to any more (link count 1), staged objects, crash leftovers.
 */
import type { Stats } from 'node:fs';
import { lstat, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DigestSchema, digestHex } from '../cas/digest.js';
import { EnvConfigSchema } from '../layer/env.js';
import { readManifest } from '../layer/manifest-read.js';
import { readdirOrEmpty as list } from '../util/fs.js';
import { liveLeases } from './leases.js';
import { DIRECT_OWNERS, type Owners, removeOwnedTree } from './owners.js';
import type { StorePaths } from './paths.js';

export interface StoreGcResult {
  removedLayers: string[];
  /**
   * Bytes of the removed layers' files (from their manifests, counted before the removal, so a dry
   * run says it too); content another kept layer shares stays in the pool (freedBytes is what went).
   */
  removedLayerBytes: number;
  /** Layer trees kept, by why: a store ref reaches them, a live sandbox leases them, or younger than the grace period. */
  keptLayers: Record<'reached' | 'leased' | 'young', number>;
  removedManifests: number;
  removedLinks: number;
  removedObjects: number;
  removedTmp: number;
  freedBytes: number;
}

/** Bytes of the files a laid-out layer holds (`name`: its tree's name), from its manifest; 0 without one. */
async function layerFileBytes(store: StorePaths, name: string): Promise<number> {
  const hex = name.split('+')[0] ?? name;
  const d = DigestSchema.safeParse(`sha256:${hex}`);
  if (!d.success) return 0;
  let n = 0;
  try {
    for await (const e of readManifest(store.manifest(d.data), `layer ${hex}`)) if (e.type === 'file') n += e.size;
  } catch {
    // no manifest (a lay-out cut short): its size is unknown, not a reason to keep it
  }
  return n;
}

async function treeBytes(p: string): Promise<number> {
  const st = await lstat(p).catch(() => null);
  if (st === null) return 0;
  if (!st.isDirectory()) return st.nlink <= 1 ? st.size : 0;
  let n = 0;
  for (const c of await list(p)) n += await treeBytes(join(p, c));
  return n;
}

/**
 * `owners`: a rootless store's layer trees belong to subordinate ids and are removed with their
 * rights. `dropShifted`: `<hex>+<shift>` trees go even when a ref reaches their layer (unless a live
 * sandbox leases them): left over from before sandboxes mounted the real-owner lay-out idmapped.
 */
export async function gcStore(store: StorePaths, opts: { graceMs: number; dryRun: boolean; owners?: Owners; dropShifted?: boolean }): Promise<StoreGcResult> {
  const owners = opts.owners ?? DIRECT_OWNERS;
  // Read the clock at each check: removing a layer moves its pool inodes' ctime to "now".
  const now = (): number => Date.now();
  // ctime, not mtime: lay-out gives files their recorded (any, even future) mtimes, while ctime
  // moves whenever the store touches an inode, including a link count change.
  const old = async (p: string): Promise<boolean> => {
    const st = await lstat(p).catch(() => null);
    return st !== null && now() - st.ctimeMs >= opts.graceMs;
  };
  const liveLayers = new Set<string>();
  const liveEnvs = new Set<string>();
  for (const name of await list(store.refsDir)) {
    const d = DigestSchema.safeParse((await readFile(join(store.refsDir, name), 'utf8').catch(() => '')).trim());
    if (!d.success) continue;
    liveEnvs.add(digestHex(d.data));
    const env = EnvConfigSchema.safeParse(
      await readFile(store.env(d.data), 'utf8')
        .then((s) => JSON.parse(s) as unknown)
        .catch(() => null),
    );
    if (env.success) for (const l of env.data.layers) liveLayers.add(digestHex(l.digest));
  }
  const leased = new Set<string>();
  for (const lease of await liveLeases(store)) for (const l of lease.layers) leased.add(l);

  const res: StoreGcResult = {
    removedLayers: [],
    removedLayerBytes: 0,
    keptLayers: { reached: 0, leased: 0, young: 0 },
    removedManifests: 0,
    removedLinks: 0,
    removedObjects: 0,
    removedTmp: 0,
    freedBytes: 0,
  };
  const remove = async (p: string): Promise<void> => {
    if (!opts.dryRun) await removeOwnedTree(owners, p);
  };

  // Layer trees first, so that the link counts below already reflect their removal.
  for (const name of await list(store.layersDir)) {
    const p = join(store.layersDir, name);
    if (name.startsWith('.tmp-') || name.endsWith('.lock')) {
      if (await old(p)) {
        res.removedTmp++;
        await remove(p);
      }
      continue;
    }
    const hex = name.split('+')[0] ?? name;
    const reached = liveLayers.has(hex) && !(opts.dropShifted === true && name.includes('+'));
    const why = reached ? 'reached' : leased.has(name) ? 'leased' : !(await old(p)) ? 'young' : undefined;
    if (why !== undefined) {
      res.keptLayers[why]++;
      continue;
    }
    res.removedLayers.push(name);
    res.removedLayerBytes += await layerFileBytes(store, name);
    await remove(p);
  }
  const keptLayerHex = new Set((await list(store.layersDir)).map((n) => n.split('+')[0] ?? n));
  for (const h of liveLayers) keptLayerHex.add(h);
  for (const name of await list(join(store.root, 'manifests'))) {
    const hex = name.split('.')[0] ?? name;
    if (keptLayerHex.has(hex)) continue;
    const p = join(store.root, 'manifests', name);
    if (!(await old(p))) continue;
    res.removedManifests++;
    await remove(p);
  }
  for (const name of await list(join(store.root, 'envs'))) {
    const p = join(store.root, 'envs', name);
    if (liveEnvs.has(name.replace(/\.json$/, '')) || !(await old(p))) continue;
    await remove(p);
  }
  // A pool inode no layer links to any more has one link left: its pool name.
  const collectLink = async (p: string, st: Stats | null): Promise<boolean> => {
    if (st === null || st.nlink > 1 || now() - st.ctimeMs < opts.graceMs) return false;
    res.removedLinks++;
    res.freedBytes += st.size;
    await remove(p);
    return true;
  };
  for (const name of await list(store.linksDir)) {
    const p = join(store.linksDir, name);
    const st = await lstat(p).catch(() => null);
    if (st === null) continue;
    if (!st.isDirectory()) {
      await collectLink(p, st);
      continue;
    }
    // older stores: links/<hex>/<key>
    const names = await list(p);
    let left = names.length;
    for (const n of names) {
      const q = join(p, n);
      if (await collectLink(q, await lstat(q).catch(() => null))) left--;
    }
    if (left === 0 && !opts.dryRun) await removeOwnedTree(owners, p);
  }
  for (const name of await list(store.objectsDir)) {
    const p = join(store.objectsDir, name);
    if (!(await old(p))) continue;
    res.removedObjects++;
    res.freedBytes += await treeBytes(p);
    await remove(p);
  }
  for (const name of await list(store.tmpDir)) {
    const p = join(store.tmpDir, name);
    if (!(await old(p))) continue;
    res.removedTmp++;
    await remove(p);
  }
  return res;
}
