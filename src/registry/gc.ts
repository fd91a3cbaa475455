/**
 * Registry garbage collection, in two phases so that it is safe beside running pushes.
 *
 * A push uploads packs, manifests and configs before the ref that reaches them, and it reuses
 * what the registry already holds: packs it found in the catalog, blobs whose put it skipped.
 * A one-pass gc could delete such a blob between the push's choice and its ref. So a blob that
 * no ref reaches and that is older than the grace period is first *condemned*: recorded with the
 * time in the registry's gc state, and, for a pack, taken out of the catalog, so no push starts
 * reusing it. A later gc deletes it only once it has been condemned for a whole grace period,
 * is still unreached, and was not written again since (a push that reuses a blob puts it again,
 * which refreshes a stale mtime: Registry.putBlob). Every push that could still reuse it started
 * before the condemnation, so it has had a grace period to write its ref; the later gc sees that
 * ref and spares the blob. Packs reached again get their catalog entry back.
 *
 * With a grace period of 0 nothing is protected: unreached blobs are deleted at once.
 */
import { z } from 'zod';
import { type Digest, DigestSchema } from '../cas/digest.js';
import { envClosure } from './closure.js';
import type { Registry } from './registry.js';

export interface RegistryGcResult {
  removedBlobs: { digest: Digest; size: number }[];
  removedPacks: Digest[];
  /** Unreached blobs recorded for removal by a gc at least one grace period from now. */
  condemnedBlobs: { digest: Digest; size: number; condemnedAtMs: number }[];
  /** Catalog entries written back for packs a ref reaches again. */
  restoredPacks: Digest[];
  keptBlobs: number;
  /** Why the kept blobs were kept, with their bytes: a ref reaches them, or they are younger than the grace period, or condemned (removed by a later gc). */
  kept: Record<'reachable' | 'young' | 'condemned', { blobs: number; bytes: number }>;
  freedBytes: number;
}

const GcStateSchema = z.object({
  version: z.literal(1),
  /** digest -> when it was condemned, ms since the epoch */
  condemned: z.record(DigestSchema, z.number()),
});
type GcState = z.infer<typeof GcStateSchema>;

async function readState(reg: Registry): Promise<GcState> {
  const raw = await reg.getGcState();
  if (raw === null) return { version: 1, condemned: {} };
  try {
    return GcStateSchema.parse(JSON.parse(raw.toString('utf8')));
  } catch {
    // An unreadable record condemns nothing: the blobs it named are condemned again, from now.
    return { version: 1, condemned: {} };
  }
}

export async function gcRegistry(reg: Registry, opts: { graceMs: number; dryRun: boolean; now?: number }): Promise<RegistryGcResult> {
  const now = opts.now ?? Date.now();
  const live = new Set<Digest>();
  const livePacks = new Map<Digest, Digest>();
  for await (const { digest } of reg.listRefs()) {
    const c = await envClosure(reg, digest);
    for (const b of c.blobs) live.add(b);
    for (const [pack, index] of c.packs) livePacks.set(pack, index);
  }
  const state = await readState(reg);
  const next: GcState = { version: 1, condemned: {} };
  const removedBlobs: RegistryGcResult['removedBlobs'] = [];
  const condemnedBlobs: RegistryGcResult['condemnedBlobs'] = [];
  let keptBlobs = 0;
  const kept: RegistryGcResult['kept'] = { reachable: { blobs: 0, bytes: 0 }, young: { blobs: 0, bytes: 0 }, condemned: { blobs: 0, bytes: 0 } };
  const keep = (why: keyof RegistryGcResult['kept'], size: number): void => {
    keptBlobs++;
    kept[why].blobs++;
    kept[why].bytes += size;
  };
  const present = new Set<Digest>();
  for await (const b of reg.listBlobs()) {
    present.add(b.digest);
    if (live.has(b.digest) || now - b.mtimeMs < opts.graceMs) {
      keep(live.has(b.digest) ? 'reachable' : 'young', b.size);
      continue;
    }
    const since = state.condemned[b.digest];
    // written again after its condemnation: something uses it; condemn it anew from now
    const condemnedAtMs = since !== undefined && b.mtimeMs < since ? since : now;
    if (opts.graceMs === 0 || now - condemnedAtMs >= opts.graceMs) {
      removedBlobs.push({ digest: b.digest, size: b.size });
    } else {
      keep('condemned', b.size);
      next.condemned[b.digest] = condemnedAtMs;
      condemnedBlobs.push({ digest: b.digest, size: b.size, condemnedAtMs });
    }
  }
  const unreached = new Set([...removedBlobs, ...condemnedBlobs].map((b) => b.digest));
  const removed = new Set(removedBlobs.map((b) => b.digest));
  const removedPacks: Digest[] = [];
  const withdrawn: Digest[] = [];
  const listed = new Set<Digest>();
  for await (const p of reg.listPacks()) {
    listed.add(p.pack);
    if (removed.has(p.pack) || removed.has(p.index)) removedPacks.push(p.pack);
    else if (unreached.has(p.pack) || unreached.has(p.index)) withdrawn.push(p.pack);
  }
  const restoredPacks = [...livePacks]
    .filter(([pack, index]) => !listed.has(pack) && present.has(pack) && present.has(index))
    .map(([pack]) => pack)
    .sort();
  if (!opts.dryRun) {
    // Catalog entries first: no push may start reusing a pack that is condemned or about to vanish.
    for (const p of [...removedPacks, ...withdrawn]) await reg.deletePack(p);
    for (const p of restoredPacks) await reg.putPack(p, livePacks.get(p)!);
    // The record before the deletions: a crash in between leaves blobs condemned, not forgotten.
    await reg.putGcState(Buffer.from(`${JSON.stringify(next)}\n`));
    for (const b of removedBlobs) await reg.deleteBlob(b.digest);
  }
  return { removedBlobs, removedPacks, condemnedBlobs, restoredPacks, keptBlobs, kept, freedBytes: removedBlobs.reduce((s, b) => s + b.size, 0) };
}
