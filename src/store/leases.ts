/**
 * Leases: a live sandbox's claim on the layer trees under its root. gc never removes a leased
 * layer; a lease whose holder process is gone is stale and is dropped.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { isErrno } from '../util/fs.js';
import { pidAlive } from './lock.js';
import type { StorePaths } from './paths.js';

export const LeaseSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  pid: z.number().int().positive(),
  /** Layer directory names under layers/. */
  layers: z.array(z.string()),
  created: z.string(),
});
export type Lease = z.infer<typeof LeaseSchema>;

/** The file of sandbox `id`'s lease. */
export function leaseFile(store: StorePaths, id: string): string {
  return join(store.leasesDir, `${id}.json`);
}

export async function acquireLease(store: StorePaths, id: string, layerDirs: string[], pid = process.pid): Promise<Lease> {
  const lease = LeaseSchema.parse({ id, pid, layers: layerDirs.map((d) => d.split('/').pop() ?? d), created: new Date().toISOString() });
  // synchronous: a small file per sandbox start (see store/pull.ts readOrUndefined)
  mkdirSync(store.leasesDir, { recursive: true });
  const path = leaseFile(store, id);
  writeFileSync(`${path}.tmp`, JSON.stringify(lease));
  renameSync(`${path}.tmp`, path);
  return lease;
}

export async function releaseLease(store: StorePaths, id: string): Promise<void> {
  rmSync(leaseFile(store, id), { force: true });
}

/** Live leases; stale ones (holder dead, unreadable) are removed on the way. */
export async function liveLeases(store: StorePaths): Promise<Lease[]> {
  let names: string[];
  try {
    names = await readdir(store.leasesDir);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return [];
    throw e;
  }
  const out: Lease[] = [];
  for (const n of names) {
    if (!n.endsWith('.json')) continue;
    const p = join(store.leasesDir, n);
    const parsed = LeaseSchema.safeParse(
      await readFile(p, 'utf8')
        .then((s) => JSON.parse(s) as unknown)
        .catch(() => null),
    );
    if (parsed.success && pidAlive(parsed.data.pid)) out.push(parsed.data);
    else await rm(p, { force: true });
  }
  return out;
}
