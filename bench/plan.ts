/**
 * The planning side of "rebuild a fully cached dataset" (issue 4 aims under 2 s for 50 instances):
 * load specs + dataset, plan the graph, and walk it computing each node's cache key and finding
 * it in a local registry (every key already cached, so nothing is built). Side by side with the
 * baseline a per-instance image pipeline has: every instance normalizes (re-hashes) its own
 * recipe chain and checks every layer of it, with no sharing across instances.
 *
 *   npx tsx bench/plan.ts
 *   BENCH_INSTANCES=2000 BENCH_PAIRS=60 BENCH_FILE_BYTES=4000000 BENCH_REPEATS=7 npx tsx bench/plan.ts
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Digest, sha256 } from '../src/cas/digest.js';
import { loadDataset } from '../src/dataset/read.js';
import { loadSpecs } from '../src/dataset/specs.js';
import { type BuildPlan, defaultRepoSource, nodeKey, planCounts, planDataset } from '../src/builder/plan.js';
import { loadRecipeCatalog } from '../src/recipe/catalog.js';
import { cacheKey, cacheRefName } from '../src/recipe/key.js';
import { LocalRegistry } from '../src/registry/local.js';
import type { Registry } from '../src/registry/registry.js';

const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 50);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 10);
const FILE_BYTES = Number(process.env.BENCH_FILE_BYTES ?? 1_000_000);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 7);

/** A layer digest stand-in: what the executor would record for a key. */
const layerOf = (key: Digest): Digest => sha256(`layer:${key}`);

function generate(dir: string): void {
  mkdirSync(join(dir, 'files'));
  writeFileSync(join(dir, 'base.yaml'), 'kind: base\nfrom: {type: debootstrap, include: [gpgv, ca-certificates]}\n');
  let specs = 'base: base.yaml\ndefaults: {testCmd: python3 -m pytest -rA}\nrepos:\n';
  const rows: string[] = [];
  for (let p = 0; p < PAIRS; p++) {
    // Each env copies in its own requirements file: normalizing it means hashing FILE_BYTES.
    writeFileSync(join(dir, 'files', `req${p}.txt`), Buffer.alloc(FILE_BYTES, p % 251));
    writeFileSync(
      join(dir, `env${p}.yaml`),
      `kind: env\nparent: base.yaml\nfiles: [{src: files/req${p}.txt, dest: /req.txt}]\ncommands: ["pip install -r /req.txt # ${p}"]\n`,
    );
    specs += `  org/repo${p}:\n    "1.0": {env: env${p}.yaml, install: [pip install -e .]}\n`;
  }
  for (let i = 0; i < INSTANCES; i++) {
    const p = i % PAIRS;
    rows.push(
      JSON.stringify({
        instance_id: `org__repo${p}-${i}`,
        repo: `org/repo${p}`,
        version: '1.0',
        base_commit: sha256(`c${i}`).slice(7, 47),
        FAIL_TO_PASS: '[]',
        PASS_TO_PASS: '[]',
      }),
    );
  }
  writeFileSync(join(dir, 'specs.yaml'), specs);
  writeFileSync(join(dir, 'dataset.jsonl'), `${rows.join('\n')}\n`);
}

/** Walks the plan computing keys from lower layers; returns how many keys were cached. */
async function walkCached(plan: BuildPlan, registry: Registry, publish: boolean): Promise<number> {
  const layers = new Map<string, Digest[]>(); // node id -> digests of its stack, lowest first
  let hits = 0;
  for (const n of plan.nodes) {
    const lower = n.parent === null ? [] : layers.get(n.parent)!;
    const key = nodeKey(n, lower);
    const ref = cacheRefName(n.kind, key);
    let layer = await registry.getRef(ref);
    if (layer === null && publish) {
      layer = layerOf(key);
      await registry.putRef(ref, layer);
      if (n.tag !== null) await registry.putRef(n.tag, layer);
    }
    if (layer !== null) hits++;
    layers.set(n.id, [...lower, layer ?? layerOf(key)]);
  }
  return hits;
}

async function ours(dir: string, registry: Registry): Promise<number> {
  const specs = await loadSpecs(join(dir, 'specs.yaml'));
  const rows = await loadDataset(join(dir, 'dataset.jsonl'));
  const plan = planDataset({ dataset: 'bench', rows, specs, repoSource: defaultRepoSource(dir) });
  return walkCached(plan, registry, false);
}

/** Per-instance: load and normalize the instance's env chain afresh, check each of its layers. */
async function baseline(dir: string, registry: Registry): Promise<number> {
  const specs = await loadSpecs(join(dir, 'specs.yaml'));
  const rows = await loadDataset(join(dir, 'dataset.jsonl'));
  let hits = 0;
  for (const { row } of rows) {
    const spec = specs.entries.get(`${row.repo}@${row.version}`)!;
    const { catalog, root } = await loadRecipeCatalog(spec.env);
    const chain = [root];
    for (let e = root; e.recipe.kind !== 'base'; ) {
      e = catalog.get((e.recipe.parent as { recipe: string }).recipe)!;
      chain.unshift(e);
    }
    const lower: Digest[] = [];
    for (const e of chain) {
      const layer = await registry.getRef(cacheRefName(e.recipe.kind, cacheKey(e.normalized, lower)));
      if (layer !== null) hits++;
      lower.push(layer ?? sha256('missing'));
    }
    const plan = planDataset({ dataset: 'bench', rows: [{ row, where: 'x' }], specs, repoSource: defaultRepoSource(dir) });
    const inst = plan.nodes.at(-1)!;
    if ((await registry.getRef(cacheRefName('instance', nodeKey(inst, lower)))) !== null) hits++;
  }
  return hits;
}

function stats(ms: number[]): { median: number; p99: number } {
  const s = [...ms].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)]!, p99: s[Math.min(s.length - 1, Math.ceil(s.length * 0.99) - 1)]! };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'ms-bench-plan-'));
  try {
    generate(dir);
    const registry = new LocalRegistry(join(dir, 'registry'));
    const specs = await loadSpecs(join(dir, 'specs.yaml'));
    const plan = planDataset({ dataset: 'bench', rows: await loadDataset(join(dir, 'dataset.jsonl')), specs, repoSource: defaultRepoSource(dir) });
    await walkCached(plan, registry, true); // the "first build": publish every key
    const counts = planCounts(plan);
    const expectOurs = plan.nodes.length;
    const expectBase = INSTANCES * 3;
    const t: { ours: number[]; base: number[] } = { ours: [], base: [] };
    for (let r = 0; r < REPEATS; r++) {
      let t0 = performance.now();
      const h1 = await ours(dir, registry);
      t.ours.push(performance.now() - t0);
      t0 = performance.now();
      const h2 = await baseline(dir, registry);
      t.base.push(performance.now() - t0);
      if (h1 !== expectOurs || h2 !== expectBase) throw new Error(`cache misses: ours ${h1}/${expectOurs}, baseline ${h2}/${expectBase}`);
    }
    const o = stats(t.ours);
    const b = stats(t.base);
    console.log(`fully cached dataset: ${INSTANCES} instances over ${PAIRS} (repo, version) pairs, ${FILE_BYTES} B copied-in file per env, ${REPEATS} repeats`);
    console.log(
      `layers to build:   planned ${counts.base} base + ${counts.env} env + ${counts.instance} instance = ` +
        `${expectOurs}   per-instance images: ${expectBase}   ratio ${(expectOurs / expectBase).toFixed(3)}`,
    );
    console.log(`cached rebuild check (load specs+dataset, plan, keys, ref lookups):`);
    console.log(`  minisandbox plan   median ${o.median.toFixed(1)} ms  p99 ${o.p99.toFixed(1)} ms`);
    console.log(`  per-instance chain median ${b.median.toFixed(1)} ms  p99 ${b.p99.toFixed(1)} ms`);
    console.log(
      `  ratio (plan / per-instance) ${(o.median / b.median).toFixed(3)}   target: under 2000 ms for 50 instances -> ${o.median < 2000 ? 'met' : 'MISSED'}`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
