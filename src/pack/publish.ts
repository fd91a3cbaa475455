/**
 * Uploading finished packs: both blobs first, then the catalog entry, so a registry never lists
 * a pack whose bytes or index are missing.
 */
import { rm } from 'node:fs/promises';
import type { Registry } from '../registry/registry.js';
import type { WrittenPack } from './writer.js';

export async function publishPacks(registry: Registry, packs: WrittenPack[], opts: { removeLocal?: boolean } = {}): Promise<void> {
  for (const p of packs) {
    await registry.putBlobFile(p.pack, p.packPath);
    await registry.putBlob(p.index, p.indexBytes);
    await registry.putPack(p.pack, p.index);
    if (opts.removeLocal ?? true) await rm(p.packPath, { force: true });
  }
}
