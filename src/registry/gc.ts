/**
 * Registry garbage collection: blobs and catalog entries that no ref reaches are removed once
 * older than a grace period. The grace period is what makes gc safe beside a running push, which
 * uploads packs and configs before the ref that will reach them.
 */
import type { Digest } from '../cas/digest.js';
import { envClosure } from './closure.js';
import type { Registry } from './registry.js';

export interface RegistryGcResult {
  removedBlobs: { digest: Digest; size: number }[];
  removedPacks: Digest[];
  keptBlobs: number;
  freedBytes: number;
}

export async function gcRegistry(reg: Registry, opts: { graceMs: number; dryRun: boolean; now?: number }): Promise<RegistryGcResult> {
  const now = opts.now ?? Date.now();
  const live = new Set<Digest>();
  for await (const { digest } of reg.listRefs()) {
    for (const b of (await envClosure(reg, digest)).blobs) live.add(b);
  }
  const removedBlobs: RegistryGcResult['removedBlobs'] = [];
  let keptBlobs = 0;
  for await (const b of reg.listBlobs()) {
    if (live.has(b.digest) || now - b.mtimeMs < opts.graceMs) {
      keptBlobs++;
      continue;
    }
    removedBlobs.push({ digest: b.digest, size: b.size });
  }
  const removed = new Set(removedBlobs.map((b) => b.digest));
  const removedPacks: Digest[] = [];
  for await (const p of reg.listPacks()) {
    if (removed.has(p.pack) || removed.has(p.index)) removedPacks.push(p.pack);
  }
  if (!opts.dryRun) {
    // Catalog entries first: a pusher must never dedup against a pack that is about to vanish.
    for (const p of removedPacks) await reg.deletePack(p);
    for (const b of removedBlobs) await reg.deleteBlob(b.digest);
  }
  return { removedBlobs, removedPacks, keptBlobs, freedBytes: removedBlobs.reduce((s, b) => s + b.size, 0) };
}
