import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeRandomTree } from '../../test/helpers/trees.js';
import { audit } from '../audit/audit.js';
import { digestHex, sha256 } from '../cas/digest.js';
import type { EnvConfig } from '../layer/env.js';
import { gcRegistry } from '../registry/gc.js';
import { LocalRegistry } from '../registry/local.js';
import { gcStore } from './gc.js';
import { acquireLease, releaseLease } from './leases.js';
import { StorePaths } from './paths.js';
import { pullEnv } from './pull.js';
import { pushTree } from '../publish/push.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { verifyRegistry, verifyStore } from './verify.js';

const work = mkdtempSync(join(tmpdir(), 'ms-gc-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A registry with one tagged environment, for the store tests (each test may run alone). */
async function registryWithKeep(name: string): Promise<LocalRegistry> {
  const reg = new LocalRegistry(join(work, name));
  makeRandomTree(join(work, `${name}-src`), 11, 80);
  await pushTree(reg, new StorePaths(join(work, `${name}-push`)), join(work, `${name}-src`), { tag: 'g/keep' });
  return reg;
}

describe('gc removes what no ref or live lease reaches, and nothing else', () => {
  it('registry: an untagged environment goes, a tagged one stays and still verifies', async () => {
    const reg = new LocalRegistry(join(work, 'r1'));
    const store = new StorePaths(join(work, 's1'));
    makeRandomTree(join(work, 'keep'), 11, 80);
    makeRandomTree(join(work, 'drop'), 12, 80);
    const kept = await pushTree(reg, store, join(work, 'keep'), { tag: 'g/keep' });
    const dropped = await pushTree(reg, store, join(work, 'drop'), { tag: 'g/drop' });
    await reg.deleteRef('g/drop');

    const young = await gcRegistry(reg, { graceMs: 3_600_000, dryRun: false });
    expect(young.removedBlobs).toEqual([]); // inside the grace period nothing goes

    const dry = await gcRegistry(reg, { graceMs: 0, dryRun: true });
    expect(dry.removedBlobs.map((b) => b.digest)).toContain(dropped.env);
    expect(await reg.statBlob(dropped.env)).not.toBeNull();

    const real = await gcRegistry(reg, { graceMs: 0, dryRun: false });
    expect(real.removedBlobs.map((b) => b.digest)).toContain(dropped.env);
    expect(real.removedBlobs.map((b) => b.digest)).not.toContain(kept.env);
    expect(await reg.statBlob(dropped.env)).toBeNull();
    const report = await verifyRegistry(reg, work);
    expect(report.problems).toEqual([]);
    expect(report.refs).toBe(1);
  });

  it('store: a leased layer survives gc until its lease ends, an unreferenced one goes', async () => {
    const reg = await registryWithKeep('lease-a');
    const store = new StorePaths(join(work, 'node'));
    const pulled = await pullEnv(reg, store, 'g/keep');
    // forget the ref, as if the environment was dropped from the node's working set
    rmSync(store.ref('g/keep'));
    await acquireLease(store, 'sbx-1', pulled.layerDirs);
    let r = await gcStore(store, { graceMs: 0, dryRun: false });
    expect(r.removedLayers).toEqual([]);
    expect(existsSync(pulled.layerDirs[0]!)).toBe(true);
    await releaseLease(store, 'sbx-1');
    r = await gcStore(store, { graceMs: 0, dryRun: false });
    expect(r.removedLayers).toHaveLength(1);
    expect(existsSync(pulled.layerDirs[0]!)).toBe(false);
    expect(r.removedLinks).toBeGreaterThan(0);
    expect(readdirSync(store.linksDir)).toEqual([]);
  });

  it('store: a lease held by a dead process is stale and does not protect', async () => {
    const reg = await registryWithKeep('lease-b');
    const store = new StorePaths(join(work, 'node2'));
    const pulled = await pullEnv(reg, store, 'g/keep');
    rmSync(store.ref('g/keep'));
    await acquireLease(store, 'sbx-dead', pulled.layerDirs, 2 ** 22 + 12345); // no such pid
    const r = await gcStore(store, { graceMs: 0, dryRun: false });
    expect(r.removedLayers).toHaveLength(1);
  });
});

describe('verify finds corruption in registry and store', () => {
  it('reports a corrupt blob, the ref that reaches it, and a tampered layer file', async () => {
    const reg = new LocalRegistry(join(work, 'r2'));
    const store = new StorePaths(join(work, 's2'));
    makeRandomTree(join(work, 'v'), 21, 60);
    await pushTree(reg, store, join(work, 'v'), { tag: 'v/x' });
    const { config } = await resolveEnv(reg, 'v/x');
    const pulled = await pullEnv(reg, store, 'v/x');
    expect((await verifyRegistry(reg, work)).problems).toEqual([]);
    expect((await verifyStore(store)).problems).toEqual([]);

    const idx = join(reg.root, 'blobs', 'sha256', digestHex(config.layers[0]!.packs[0]!.index));
    chmodSync(idx, 0o644);
    writeFileSync(idx, Buffer.concat([readFileSync(idx), Buffer.from('x')]));
    const rep = await verifyRegistry(reg, work);
    expect(rep.problems.map((p) => p.kind)).toEqual(expect.arrayContaining(['corrupt-blob', 'bad-catalog', 'dangling-ref']));

    const victim = readdirSync(pulled.layerDirs[0]!, { recursive: true, withFileTypes: true }).find((d) => d.isFile())!;
    const victimPath = join(victim.parentPath, victim.name);
    writeFileSync(victimPath, 'tampered');
    const st = await verifyStore(store);
    expect(st.problems.length).toBeGreaterThan(0);
  });
});

describe('audit', () => {
  it('counts an image per ref, shared layers once, contents once', async () => {
    const reg = new LocalRegistry(join(work, 'r3'));
    const store = new StorePaths(join(work, 's3'));
    mkdirSync(join(work, 'base'));
    makeRandomTree(join(work, 'base'), 31, 100);
    const base = await pushTree(reg, store, join(work, 'base'), { tag: 'a/base' });
    const parent = await resolveEnv(reg, 'a/base');
    makeRandomTree(join(work, 'i1'), 32, 20);
    makeRandomTree(join(work, 'i2'), 33, 20);
    const i1 = await pushTree(reg, store, join(work, 'i1'), { tag: 'a/i1', parent });
    const i2 = await pushTree(reg, store, join(work, 'i2'), { tag: 'a/i2', parent });
    const r = await audit(reg);
    const L = base.layer.size;
    expect(r.totals.refs).toBe(3);
    expect(r.totals.logicalBytes).toBe(L + (L + i1.layer.size) + (L + i2.layer.size));
    expect(r.totals.dockerStyleBytes).toBe(L + i1.layer.size + i2.layer.size);
    expect(r.totals.uniqueContentBytes).toBeLessThanOrEqual(r.totals.dockerStyleBytes);
    expect(r.totals.registryBytes).toBeGreaterThan(0);
    expect(r.totals.registryToLogical).toBeCloseTo(r.totals.registryBytes / r.totals.logicalBytes, 10);
  });

  it('refuses a layer whose manifest is not the one its digest names', async () => {
    const reg = new LocalRegistry(join(work, 'r4'));
    const store = new StorePaths(join(work, 's4'));
    mkdirSync(join(work, 'a4'));
    makeRandomTree(join(work, 'a4'), 41, 30);
    mkdirSync(join(work, 'b4'));
    makeRandomTree(join(work, 'b4'), 42, 30);
    const a = await pushTree(reg, store, join(work, 'a4'), { tag: 'x/a' });
    const b = await pushTree(reg, store, join(work, 'b4'), { tag: 'x/b' });
    // A hostile config: layer a's identity, with layer b's (intact, correctly named) manifest blob.
    const env = JSON.parse((await reg.getBlob(a.env)).toString('utf8')) as EnvConfig;
    const forged = Buffer.from(JSON.stringify({ ...env, layers: [{ ...env.layers[0]!, manifest: b.layer.manifest }] }));
    await reg.putBlob(sha256(forged), forged);
    await reg.deleteRef('x/b');
    await reg.putRef('x/a', sha256(forged));
    await expect(audit(reg)).rejects.toThrow(new RegExp(`manifest of layer ${a.layer.digest}: expected`));
  });
});
