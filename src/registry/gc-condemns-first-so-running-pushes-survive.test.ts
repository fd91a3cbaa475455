/**
 * Registry gc in two phases (registry/gc.ts): an unreached blob is condemned first and deleted
 * by a later gc, a grace period on, so a push that chose to reuse it before the condemnation has
 * that long to publish its ref. Times are given to gc (`now`), so no test waits an hour.
 */
import { mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { type Digest, sha256 } from '../cas/digest.js';
import { loadCatalog } from '../store/catalog.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { verifyRegistry } from '../store/verify.js';
import { gcRegistry } from './gc.js';
import { LocalRegistry } from './local.js';

const HOUR = 3_600_000;
const work = mkdtempSync(join(tmpdir(), 'ms-gc2-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function packsListed(reg: LocalRegistry): Promise<Digest[]> {
  const out: Digest[] = [];
  for await (const p of reg.listPacks()) out.push(p.pack);
  return out;
}

async function setup(name: string): Promise<{ reg: LocalRegistry; store: StorePaths; src: string; dropped: Awaited<ReturnType<typeof pushTree>> }> {
  const reg = new LocalRegistry(join(work, name));
  const store = new StorePaths(join(work, `${name}-store`));
  const src = join(work, `${name}-src`);
  makeRandomTree(src, 21, 60);
  const dropped = await pushTree(reg, store, src, { tag: 'g/dropped' });
  await reg.deleteRef('g/dropped');
  return { reg, store, src, dropped };
}

describe('registry gc condemns before it deletes', () => {
  it('deletes an unreached blob only at a gc a whole grace period after the one that condemned it', async () => {
    const { reg, dropped } = await setup('phases');
    const t0 = Date.now() + 2 * HOUR; // every blob is older than the grace period by then
    const first = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: t0 });
    expect(first.removedBlobs).toEqual([]);
    expect(first.condemnedBlobs.map((b) => b.digest)).toContain(dropped.env);
    // a condemned pack is out of the catalog at once: no new push starts reusing it
    expect(await packsListed(reg)).toEqual([]);
    const early = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: t0 + HOUR / 2 });
    expect(early.removedBlobs).toEqual([]);
    expect(early.condemnedBlobs.find((b) => b.digest === dropped.env)?.condemnedAtMs).toBe(t0);
    const late = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: t0 + HOUR + 1 });
    expect(late.removedBlobs.map((b) => b.digest)).toContain(dropped.env);
    expect(late.condemnedBlobs).toEqual([]);
    expect(await reg.statBlob(dropped.env)).toBeNull();
    expect((await verifyRegistry(reg, work)).problems).toEqual([]);
  });

  it('a push that chose to reuse a pack before gc condemned it publishes, and the next gc keeps and re-lists the pack', async () => {
    const { reg, store, src, dropped } = await setup('race');
    const t0 = Date.now() + 2 * HOUR;
    // The push has read the catalog (and so chosen the old pack) before gc runs ...
    const catalog = await loadCatalog(reg, store);
    const condemned = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: t0 });
    expect(condemned.condemnedBlobs.map((b) => b.digest)).toEqual(expect.arrayContaining(dropped.layer.packs.map((p) => p.pack)));
    // ... and publishes after it, within the grace period.
    const again = await pushTree(reg, store, src, { tag: 'g/again', catalog: () => Promise.resolve(catalog) });
    expect(again.newObjects).toBe(0);
    expect(again.layer.packs).toEqual(dropped.layer.packs);
    const next = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: t0 + HOUR + 1 });
    expect(next.removedBlobs).toEqual([]);
    expect(next.restoredPacks).toEqual(dropped.layer.packs.map((p) => p.pack).sort());
    expect(await packsListed(reg)).toEqual(expect.arrayContaining(dropped.layer.packs.map((p) => p.pack)));
    const report = await verifyRegistry(reg, work);
    expect(report.problems).toEqual([]);
    expect(report.refs).toBe(1);
  });

  it('a condemned blob that a push writes again is condemned anew, not deleted', async () => {
    const reg = new LocalRegistry(join(work, 'rewrite'));
    const data = Buffer.from('{"some":"config"}');
    const digest = sha256(data);
    await reg.putBlob(digest, data);
    const path = join(work, 'rewrite', 'blobs', 'sha256', digest.slice('sha256:'.length));
    const old = new Date(Date.now() - 3 * HOUR);
    utimesSync(path, old, old);
    const now = Date.now();
    const first = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now });
    expect(first.condemnedBlobs.map((b) => b.digest)).toEqual([digest]);
    // a push reusing it puts it again: the stale mtime is refreshed
    await reg.putBlob(digest, data);
    expect((await reg.statBlob(digest))!.mtimeMs).toBeGreaterThanOrEqual(now - 1000);
    const later = await gcRegistry(reg, { graceMs: HOUR, dryRun: false, now: Date.now() + HOUR + 1 });
    expect(later.removedBlobs).toEqual([]);
    expect(later.condemnedBlobs.map((b) => b.digest)).toEqual([digest]);
    expect(await reg.statBlob(digest)).not.toBeNull();
  });

  it('with no grace period deletes at once, and a dry run changes nothing', async () => {
    const { reg, dropped } = await setup('zero');
    const dry = await gcRegistry(reg, { graceMs: 0, dryRun: true });
    expect(dry.removedBlobs.map((b) => b.digest)).toContain(dropped.env);
    expect(await reg.getGcState()).toBeNull();
    expect(await packsListed(reg)).toHaveLength(dropped.layer.packs.length);
    const real = await gcRegistry(reg, { graceMs: 0, dryRun: false });
    expect(real.condemnedBlobs).toEqual([]);
    expect(await reg.statBlob(dropped.env)).toBeNull();
    expect(await packsListed(reg)).toEqual([]);
  });
});
