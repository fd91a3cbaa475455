/**
 * Which objects a registry already holds, and where: the union of its pack indexes.
 * Index blobs are immutable, so a node caches them forever under the store's indexes/.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Digest } from '../cas/digest.js';
import { verifyDigest } from '../cas/digest.js';
import type { PackRef } from '../layer/env.js';
import { type PackIndex, parsePackIndex } from '../pack/pack-index.js';
import type { Registry } from '../registry/registry.js';
import { isErrno } from '../util/fs.js';
import type { StorePaths } from './paths.js';

/** Reads a pack index blob through the store's cache, verified either way. */
export async function loadPackIndex(reg: Registry, store: StorePaths, ref: PackRef): Promise<PackIndex> {
  const cached = store.index(ref.index);
  let bytes: Buffer;
  try {
    bytes = await readFile(cached);
    verifyDigest(`pack index ${ref.index} (store cache)`, ref.index, bytes);
  } catch (e) {
    if (!isErrno(e, 'ENOENT')) throw e;
    bytes = await reg.getBlob(ref.index);
    verifyDigest(`pack index ${ref.index}`, ref.index, bytes);
    await mkdir(join(cached, '..'), { recursive: true });
    const tmp = `${cached}.${randomBytes(6).toString('hex')}`;
    await writeFile(tmp, bytes);
    await rename(tmp, cached);
  }
  return parsePackIndex(bytes, ref.index);
}

export type ObjectCatalog = Map<Digest, PackRef>;

/** Every object in every pack of the registry's catalog. */
export async function loadCatalog(reg: Registry, store: StorePaths): Promise<ObjectCatalog> {
  const catalog: ObjectCatalog = new Map();
  for await (const ref of reg.listPacks()) {
    const index = await loadPackIndex(reg, store, ref);
    for (const e of index.entries) if (!catalog.has(e.digest)) catalog.set(e.digest, ref);
  }
  return catalog;
}
