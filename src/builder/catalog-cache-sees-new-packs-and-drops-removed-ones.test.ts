/**
 * The build's shared object catalog: a refresh sees packs published since the last one (by this
 * build or anyone else) without re-reading the old ones, and starts over when a pack disappears.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';
import { CatalogCache } from './catalog-cache.js';

const work = mkdtempSync(join(tmpdir(), 'ms-catalog-cache-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function tree(name: string, files: Record<string, string>): string {
  const dir = join(work, 'trees', name);
  mkdirSync(dir, { recursive: true });
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text);
  return dir;
}

describe('CatalogCache', () => {
  const reg = new LocalRegistry(join(work, 'registry'));
  const store = new StorePaths(join(work, 'store'));

  it('adds packs published after the first refresh, and a push through it reuses what is there', async () => {
    const cache = new CatalogCache(reg, store);
    expect((await cache.refresh()).size).toBe(0);
    await pushTree(reg, store, tree('a', { x: 'alpha\n', y: 'beta\n' }));
    const after = await cache.refresh();
    expect([...after.keys()].sort()).toEqual([sha256('alpha\n'), sha256('beta\n')].sort());
    // a second writer publishes through its own catalog; the cache picks that pack up too
    await pushTree(reg, store, tree('b', { z: 'gamma\n' }));
    expect((await cache.refresh()).has(sha256('gamma\n'))).toBe(true);
    // the cached catalog makes the next push store only the new content
    const r = await pushTree(reg, store, tree('c', { x: 'alpha\n', w: 'delta\n' }), { catalog: () => cache.refresh() });
    expect(r.reusedObjects).toBe(1);
    expect(r.newObjects).toBe(1);
  });

  it('concurrent refreshes share one catalog, each including the packs listed before it was called', async () => {
    const cache = new CatalogCache(reg, store);
    const first = cache.refresh();
    await pushTree(reg, store, tree('d', { v: 'epsilon\n' }));
    const second = cache.refresh();
    const [a, b] = await Promise.all([first, second]);
    expect(a).toBe(b);
    expect(b.has(sha256('epsilon\n'))).toBe(true);
  });

  it('starts over when a pack is removed from the registry (a gc), so it never offers its objects', async () => {
    const cache = new CatalogCache(reg, store);
    const before = await cache.refresh();
    const gone = before.get(sha256('gamma\n'))!;
    await reg.deletePack(gone.pack);
    const after = await cache.refresh();
    expect(after.has(sha256('gamma\n'))).toBe(false);
    expect(after.has(sha256('alpha\n'))).toBe(true);
  });
});
