import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../cas/digest.js';
import type { LocatedRow } from '../dataset/row.js';
import { DatasetRowSchema } from '../dataset/row.js';
import { loadSpecs, type Specs } from '../dataset/specs.js';
import { type BuildPlan, datasetNameFromFile, defaultRepoSource, lowerChain, nodeKey, planCounts, planDataset, planRecipe } from './plan.js';
import { parseShard } from './plan-shard.js';
import { loadRecipeCatalog } from '../recipe/catalog.js';

const REPOS = 12;
const VERSIONS = 5; // 60 (repo, version) pairs
const INSTANCES = 500;

async function bigSpecs(): Promise<Specs> {
  const dir = await mkdtemp(join(tmpdir(), 'plan-'));
  await writeFile(join(dir, 'base.yaml'), 'kind: base\nfrom: {type: debootstrap, include: [gpgv]}\n');
  await writeFile(join(dir, 'tools.yaml'), 'kind: env\nname: tools\nparent: base.yaml\ncommands: [apt-get install -y git]\n');
  let y = 'base: base.yaml\ndefaults: {testCmd: pytest -rA}\nrepos:\n';
  for (let r = 0; r < REPOS; r++) {
    y += `  org/repo${r}:\n`;
    // Every env sits on a shared "tools" env: the chain base -> tools -> env is planned once.
    for (let v = 0; v < VERSIONS; v++) y += `    "${v}.0": {env: {kind: env, parent: tools.yaml, commands: ["pip install repo${r}==${v}"]}}\n`;
  }
  await writeFile(join(dir, 'specs.yaml'), y);
  return loadSpecs(join(dir, 'specs.yaml'));
}

function rows(n: number): LocatedRow[] {
  return Array.from({ length: n }, (_, i) => ({
    where: `d.jsonl:${i + 1}`,
    row: DatasetRowSchema.parse({
      instance_id: `org__repo${i % REPOS}-${i}`,
      repo: `org/repo${i % REPOS}`,
      version: `${Math.floor(i / REPOS) % VERSIONS}.0`,
      base_commit: sha256(String(i)).slice(7, 47),
    }),
  }));
}

function assertTopological(plan: BuildPlan): void {
  const seen = new Set<string>();
  for (const n of plan.nodes) {
    if (n.parent !== null) expect(seen.has(n.parent)).toBe(true);
    seen.add(n.id);
  }
}

describe('planDataset', () => {
  it('builds each distinct env once: 500 instances over 60 (repo, version) pairs give 60 env nodes', async () => {
    const specs = await bigSpecs();
    const plan = planDataset({ dataset: 'big', rows: rows(INSTANCES), specs, repoSource: defaultRepoSource('/srv/repos') });
    expect(planCounts(plan)).toEqual({ base: 1, env: 61, history: 0, instance: 500 }); // 60 + the shared tools env
    assertTopological(plan);
    const inst = plan.nodes.find((n) => n.id === 'instance:org__repo3-3');
    expect(inst?.tag).toBe('big/org__repo3-3');
    expect(inst?.recipe).toMatchObject({ kind: 'instance', repo: { path: '/srv/repos/org/repo3' }, workdir: '/testbed' });
    expect(inst?.test).toMatchObject({ testCmd: 'pytest -rA', logParser: 'pytest' });
    const chain = lowerChain(plan, 'instance:org__repo3-3').map((id) => plan.nodes.find((n) => n.id === id)?.label);
    expect(chain).toEqual(['base.yaml', 'tools', 'repos["org/repo3"]["0.0"].env']);
    expect(plan.nodes.find((n) => n.kind === 'base')?.instanceIds).toHaveLength(500);
  });

  it('gives the same node ids and keys when planned twice; keys change with the parents', async () => {
    const a = planDataset({ dataset: 'big', rows: rows(50), specs: await bigSpecs(), repoSource: defaultRepoSource() });
    const b = planDataset({ dataset: 'big', rows: rows(50).reverse(), specs: await bigSpecs(), repoSource: defaultRepoSource('/elsewhere') });
    expect(a.nodes.map((n) => n.id).sort()).toEqual(b.nodes.map((n) => n.id).sort());
    const env = a.nodes.find((n) => n.kind === 'env' && n.label !== 'tools')!;
    const same = b.nodes.find((n) => n.id === env.id)!;
    const p = [sha256('base layer'), sha256('tools layer')];
    expect(nodeKey(env, p)).toBe(nodeKey(same, p));
    expect(nodeKey(env, [sha256('other base'), p[1]!])).not.toBe(nodeKey(env, p));
    // The repository's location is not part of an instance's key: the commit pins the content.
    const ia = a.nodes.find((n) => n.kind === 'instance')!;
    const ib = b.nodes.find((n) => n.id === ia.id)!;
    expect(nodeKey(ia, p)).toBe(nodeKey(ib, p));
  });

  it('splits instances across shards deterministically, disjointly and evenly', async () => {
    const specs = await bigSpecs();
    const N = 7;
    const all = rows(INSTANCES);
    const shards = Array.from({ length: N }, (_, i) =>
      planDataset({ dataset: 'big', rows: all, specs, repoSource: defaultRepoSource(), shard: parseShard(`${i}/${N}`) }),
    );
    const ids = shards.map((s) => s.nodes.filter((n) => n.kind === 'instance').map((n) => n.id));
    const flat = ids.flat();
    expect(new Set(flat).size).toBe(INSTANCES);
    expect(flat).toHaveLength(INSTANCES);
    const sizes = ids.map((s) => s.length);
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
    // Contiguous runs by (repo, version): an env is planned by at most the shards its run straddles.
    const envBuilds = shards.reduce((acc, s) => acc + planCounts(s).env - 1, 0);
    expect(envBuilds).toBeLessThanOrEqual(60 + N - 1);
    const again = planDataset({ dataset: 'big', rows: [...all].reverse(), specs, repoSource: defaultRepoSource(), shard: parseShard(`3/${N}`) });
    expect(again.nodes.filter((n) => n.kind === 'instance').map((n) => n.id)).toEqual(ids[3]);
    expect(() => parseShard('7/7')).toThrow(/invalid shard "7\/7"/);
    expect(() => parseShard('1-3')).toThrow(/invalid shard/);
  });

  it('names the row of an unknown repo or version', async () => {
    const specs = await bigSpecs();
    const bad = rows(3);
    bad[2] = { where: 'd.jsonl:3', row: { ...bad[2]!.row, version: '9.9' } };
    expect(() => planDataset({ dataset: 'big', rows: bad, specs, repoSource: defaultRepoSource() })).toThrow(
      /^d\.jsonl:3: no spec for repo org\/repo2 version "9\.9"/,
    );
  });

  it('plans a single recipe with its parent chain and names datasets from files', async () => {
    const specs = await bigSpecs();
    const tools = [...specs.catalog.keys()].find((k) => k.endsWith('tools.yaml'))!;
    const { catalog, root } = await loadRecipeCatalog(tools);
    const plan = planRecipe(catalog, root.source, 'mine/tools');
    expect(plan.nodes.map((n) => n.kind)).toEqual(['base', 'env']);
    expect(plan.nodes[1]?.tag).toBe('mine/tools');
    const refEnv = join(tools, '..', 'on-ref.yaml');
    await writeFile(refEnv, 'kind: env\nparent: {ref: images/py311}\ncommands: [echo ok]\n');
    const onRef = await loadRecipeCatalog(refEnv);
    const refPlan = planRecipe(onRef.catalog, onRef.root.source);
    expect(refPlan.nodes).toHaveLength(1);
    expect(refPlan.nodes[0]).toMatchObject({ parent: null, parentRef: 'images/py311' });
    expect(datasetNameFromFile('/x/swe-bench-lite.jsonl')).toBe('swe-bench-lite');
    expect(datasetNameFromFile('recipes/demo/dataset.jsonl')).toBe('demo');
  });
});
