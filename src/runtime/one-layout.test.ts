/**
 * A root store lays each layer out once, with its real owners: task sandboxes (idmapped, each with
 * its own id range), builds' parent pulls and export all use `layers/<hex>`. A store made before,
 * with `layers/<hex>+<shift>` trees, keeps working and gc removes those trees once unleased.
 */
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { createSandbox, probeHost, type Sandbox } from '../sandbox/index.js';
import { exportEnv } from '../store/export.js';
import { gcStore } from '../store/gc.js';
import { acquireLease, releaseLease } from '../store/leases.js';
import { StorePaths } from '../store/paths.js';
import { pullEnv } from '../store/pull.js';
import { pushTree } from '../publish/push.js';
import { hostIdShift, layerMapping, openSandbox, shiftedLayersObsolete } from './open.js';

const work = mkdtempSync(join(tmpdir(), 'ms-one-layout-'));
// Shifted sandboxes (the older stores below) walk the store's path with their own ids.
chmodSync(work, 0o711);
const reg = new LocalRegistry(join(work, 'registry'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('these tests are about root stores');
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  mkdirSync(join(root, 'home/dev'), { recursive: true });
  writeFileSync(join(root, 'home/dev/notes'), 'mine\n');
  chownSync(join(root, 'home/dev/notes'), 1000, 1000);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: 'one/busybox', config: { workdir: '/root' } });
});

/**
 * A store only root can enter (`open`: one shifted sandboxes can walk): idmapped sandboxes never
 * walk a store path with their own ids.
 */
function newStore(name: string, open = false): StorePaths {
  const store = new StorePaths(join(work, name));
  mkdirSync(store.layersDir, { recursive: true, mode: 0o700 });
  chmodSync(store.root, open ? 0o711 : 0o700);
  if (open) chmodSync(store.layersDir, 0o711);
  return store;
}

async function hostRangeStart(sb: Sandbox): Promise<number> {
  return Number((await readFile(`/proc/${sb.state.holderPid}/uid_map`, 'utf8')).trim().split(/\s+/)[1]);
}

describe('one lay-out per layer on a root store', () => {
  it('sandboxes, a build-style pull and export share layers/<hex> of a root-only store; inside, files show their real owners', async () => {
    const store = newStore('store-a');
    expect(await layerMapping(store, await probeHost())).toEqual({ kind: 'idmap' });
    expect(await hostIdShift(store)).toBe(0);
    const a = await openSandbox(reg, store, 'one/busybox');
    const b = await openSandbox(reg, store, 'one/busybox');
    try {
      expect(a.state.idmapLowers).toBe(true);
      const o = await a.exec('stat -c "%u:%g" /bin/busybox /home/dev/notes');
      expect(o.stdout).toBe('0:0\n1000:1000\n');
      const [sa, sb] = [await hostRangeStart(a), await hostRangeStart(b)];
      expect(Math.abs(sa - sb)).toBeGreaterThanOrEqual(65536);
      // what builds pull (idShift 0) and what export reads are the same trees
      const pulled = await pullEnv(reg, store, 'one/busybox', { idShift: 0 });
      expect(pulled.layerDirs).toEqual(a.state.lowerDirs);
      await exportEnv(reg, store, 'one/busybox', join(work, 'export-a'));
      expect(readdirSync(store.layersDir).filter((n) => !n.endsWith('.lock'))).toEqual(pulled.layerDirs.map((d) => d.split('/').pop()));
      // on the host, the layer keeps its real owners
      expect(lstatSync(join(pulled.layerDirs[0]!, 'home/dev/notes')).uid).toBe(1000);
    } finally {
      await a.destroy();
      await b.destroy();
    }
  });

  it('a store with shifted trees from before keeps working, and gc removes those trees once no sandbox leases them', async () => {
    const store = newStore('store-b', true);
    const host = await probeHost();
    const shift = host.idMap.uidStart;
    // what the previous version left: the layer laid out shifted for sandboxes
    const old = await pullEnv(reg, store, 'one/busybox', { idShift: shift });
    expect(old.layerDirs[0]).toMatch(/\+\d+$/);
    // a sandbox of the previous kind, still running over it, with its lease
    const legacy = await createSandbox({ lowerDirs: old.layerDirs, stateDir: store.sandboxesDir }, { host });
    await acquireLease(store, legacy.id, old.layerDirs);
    const sb = await openSandbox(reg, store, 'one/busybox');
    try {
      expect(sb.state.lowerDirs[0]).not.toMatch(/\+/);
      expect((await sb.exec('stat -c %u /home/dev/notes')).stdout).toBe('1000\n');
      expect((await legacy.exec('stat -c %u /home/dev/notes')).stdout).toBe('1000\n');
      expect(await shiftedLayersObsolete(store)).toBe(true);
      const kept = await gcStore(store, { graceMs: 0, dryRun: false, dropShifted: true });
      expect(kept.removedLayers).toEqual([]);
      await legacy.destroy();
      await releaseLease(store, legacy.id);
      const gc = await gcStore(store, { graceMs: 0, dryRun: false, dropShifted: true });
      expect(gc.removedLayers).toEqual(old.layerDirs.map((d) => d.split('/').pop()));
      // the shifted tree's own pool inodes (owners differ from the real-owner ones) went with it
      expect(gc.removedLinks).toBeGreaterThan(0);
      expect(readdirSync(store.layersDir).some((n) => n.includes('+'))).toBe(false);
      expect((await sb.exec('/bin/busybox true')).exitCode).toBe(0);
    } finally {
      await legacy.destroy();
      await sb.destroy();
    }
  });

  it('without idmapped mounts (MINISANDBOX_IDMAP=0) root falls back to the shifted lay-out, saying so', async () => {
    const store = newStore('store-c', true);
    const warnings: string[] = [];
    process.env.MINISANDBOX_IDMAP = '0';
    try {
      const sb = await openSandbox(reg, store, 'one/busybox', { warn: (m) => warnings.push(m) });
      try {
        expect(sb.state.idmapLowers).toBeUndefined();
        expect(sb.state.lowerDirs[0]).toMatch(/\+\d+$/);
        expect((await sb.exec('stat -c %u /home/dev/notes')).stdout).toBe('1000\n');
      } finally {
        await sb.destroy();
      }
    } finally {
      delete process.env.MINISANDBOX_IDMAP;
    }
    expect(warnings.join('\n')).toMatch(/idmapped mounts are not available.*MINISANDBOX_IDMAP=0/);
  });
});
