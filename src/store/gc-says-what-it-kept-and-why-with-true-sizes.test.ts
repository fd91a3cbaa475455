/**
 * `gc` says what it kept and why (a tag reaches it, the grace period, a condemnation, a lease) and
 * totals what it removes, or would remove, in real bytes: after a tag was removed, three gc runs
 * said only "0 blobs (0 B) ... 37 blobs kept", and a dry run totalled the layers it listed as 0 B.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { type Ran, runCli } from '../../test/helpers/run-cli.js';

const TAG = 'gc/busybox';
const { work, store } = publishedBusybox('ms-gc-says-', TAG);
const cli = (...args: string[]): Promise<Ran> => runCli(['--registry', join(work, 'registry'), '--store', store.root, ...args]);

interface GcJson {
  graceMs: number;
  store: { removedLayers: string[]; removedLayerBytes: number; keptLayers: Record<string, number> } | null;
  registry: { removedBlobs: unknown[]; freedBytes: number; kept: Record<'reachable' | 'young' | 'condemned', { blobs: number; bytes: number }> } | null;
}

async function gc(...args: string[]): Promise<{ text: string; json: GcJson }> {
  const text = await cli('gc', ...args);
  expect(text.code, text.stderr).toBe(0);
  const json = await cli('--json', 'gc', '--dry-run', ...args.filter((a) => a !== '--dry-run'));
  return { text: text.stdout, json: JSON.parse(json.stdout) as GcJson };
}

describe('gc', () => {
  it('says which blobs and layers it kept and why, and what it removes in real bytes', async () => {
    expect((await cli('pull', TAG)).code).toBe(0);
    const first = await gc('--dry-run');
    expect(first.json.registry!.kept.reachable.blobs).toBeGreaterThan(0);
    expect(first.json.registry!.kept.young.blobs).toBe(0);
    expect(first.json.store!.keptLayers).toEqual({ reached: 1, leased: 0, young: 0 });
    expect(first.text).toMatch(/registry: kept \d+ blobs a tag reaches \([\d.]+ [KM]iB\)/);

    // the tag gone, the grace period is why its blobs stay: said, with their size
    expect((await cli('rm', TAG)).code).toBe(0);
    const young = await gc();
    expect(young.json.registry!.kept.reachable.blobs).toBe(0);
    expect(young.json.registry!.kept.young.bytes).toBeGreaterThan(0);
    expect(young.text).toMatch(/registry: removed 0 blobs .* younger than the grace period \(1h: [\d.]+ [KM]iB\)/s);

    // the store's own record of the pulled tag removed by hand: its layer, with the bytes of its files
    rmSync(store.ref(TAG));
    const layers = await gc('--store-only', '--dry-run', '--grace', '0');
    expect(layers.json.store!.removedLayers).toHaveLength(1);
    expect(layers.json.store!.removedLayerBytes).toBeGreaterThan(100_000); // busybox itself
    expect(layers.text).toMatch(/store: would remove 1 layers \([\d.]+ [KM]iB of files\)/);
    expect(layers.text).toContain('(dry run: nothing removed)');

    const gone = await gc('--grace', '0');
    expect(gone.text).toMatch(/registry: removed \d+ blobs \([\d.]+ [KM]iB\)/);
    expect(gone.text).not.toMatch(/registry: removed 0 blobs/);
  });

  it('refuses --store-only with --registry-only', async () => {
    const r = await cli('gc', '--store-only', '--registry-only');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--store-only.*cannot be used with.*--registry-only/);
  });
});
