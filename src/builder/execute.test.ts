/**
 * The build executor on the hermetic test recipes (busybox base, shell project): real build
 * sandboxes, real captures of their upper dirs, real git checkouts.
 */
import { execFile } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { loadRecipeCatalog } from '../recipe/catalog.js';
import { LocalRegistry } from '../registry/local.js';
import { openSandbox } from '../runtime/open.js';
import { StorePaths } from '../store/paths.js';
import { executePlan } from './execute.js';
import { defaultRepoSource, planDataset, planRecipe } from './plan.js';

const work = mkdtempSync(join(tmpdir(), 'ms-build-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const recipes = join(work, 'recipes');
const repos = join(work, 'repos');
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(async () => {
  cpSync(resolve('recipes/test'), recipes, { recursive: true, filter: (src) => !src.includes('/repos') });
  // from its place in the checkout: it sources recipes/lib/, which the copy does not hold
  await promisify(execFile)(resolve('recipes/test/make-repo.sh'), [join(repos, 'test/shlib')]);
});

/** Sandboxes and moved-aside upper dirs still in the store. */
function leftovers(): string[] {
  const ls = (d: string): string[] => (existsSync(d) ? readdirSync(d) : []);
  return [...ls(store.sandboxesDir), ...ls(store.tmpDir).filter((n) => n.startsWith('trash-'))];
}

const opts = { registry: reg, store, logDir: join(work, 'logs'), jobs: 2, keepGoing: true, force: false, timeoutMs: 120_000 };

async function datasetPlan() {
  return planDataset({
    dataset: 'test',
    rows: await loadDataset(join(recipes, 'dataset.jsonl')),
    specs: await loadSpecs(join(recipes, 'specs.yaml')),
    repoSource: defaultRepoSource(repos),
  });
}

describe('building a dataset', () => {
  it('builds base -> env -> instances, tags every instance, and a rerun is fully cached', async () => {
    const first = await executePlan(await datasetPlan(), opts);
    expect(first.map((r) => [r.kind, r.status])).toEqual([
      ['base', 'built'],
      ['env', 'built'],
      ['instance', 'built'],
      ['instance', 'built'],
    ]);
    expect(await reg.getRef('test/test__shlib-1')).not.toBeNull();
    // each built node says where its time went; the env ran commands in a sandbox and pushed
    const env = first.find((r) => r.kind === 'env')!;
    for (const phase of ['parent-layout', 'sandbox-create', 'commands', 'push-capture', 'push-upload', 'sandbox-destroy'])
      expect(env.phasesMs?.[phase]).toBeGreaterThanOrEqual(0);
    expect(readFileSync(env.log!, 'utf8')).toMatch(/^phases: .*commands \d+\.\d\ds/m);
    // scratch is gone when executePlan returns: no sandbox, no upper dir moved aside
    expect(leftovers()).toEqual([]);
    // as root, build sandboxes mount their parents' real-owner lay-out idmapped: no shifted copy
    if (process.getuid?.() === 0) expect(readdirSync(store.layersDir).filter((n) => n.includes('+'))).toEqual([]);
    const again = await executePlan(await datasetPlan(), opts);
    expect(again.every((r) => r.status === 'cached')).toBe(true);
  });

  it('an instance holds the env layer and its checkout without future history', async () => {
    const sb = await openSandbox(reg, store, 'test/test__shlib-1');
    try {
      const o = await sb.exec(['/bin/sh', '-c', 'cat /opt/tool/stamp /opt/tool/greeting-copy; pwd; ls -a; cat .git/HEAD']);
      expect(o.stdout).toContain('built\n');
      expect(o.stdout).toContain('/testbed\n');
      // what the env build wrote was captured with the build sandbox's own range taken off: root's
      expect((await sb.exec(['stat', '-c', '%u:%g', '/opt/tool/stamp'])).stdout).toBe('0:0\n');
      expect(o.stdout).toContain('run_tests.sh');
      // one ref, main, at the base commit: loose or packed, nothing else names a later commit
      const refs = await sb.exec(['/bin/sh', '-c', 'find .git/refs -type f; grep -v "^#" .git/packed-refs 2>/dev/null; true']);
      const base = JSON.parse(readFileSync(join(recipes, 'dataset.jsonl'), 'utf8').split('\n')[0]!) as { base_commit: string };
      const lines = refs.stdout
        .trim()
        .split('\n')
        .filter((l) => l !== '');
      expect(lines.length).toBe(1);
      expect(lines[0]).toMatch(/refs\/heads\/main$/);
      if (lines[0]!.includes(' ')) expect(lines[0]).toBe(`${base.base_commit} refs/heads/main`);
    } finally {
      await sb.destroy();
    }
  });

  it('a changed env command gives a new key: the env and its instances rebuild, the base stays cached', async () => {
    const envFile = join(recipes, 'env.yaml');
    writeFileSync(envFile, `${readFileSync(envFile, 'utf8')}  - echo v2 > /opt/tool/version\n`);
    const rows = await executePlan(await datasetPlan(), opts);
    expect(rows.map((r) => r.status)).toEqual(['cached', 'built', 'built', 'built']);
  });

  it('with discard "detach" the upper dirs are removed by a process of their own, soon after', async () => {
    const rows = await executePlan(await datasetPlan(), { ...opts, force: true, discard: 'detach' });
    expect(rows.every((r) => r.status === 'built')).toBe(true);
    expect(readdirSync(store.sandboxesDir)).toEqual([]);
    await eventually(() => leftovers().length === 0, 100);
    expect(leftovers()).toEqual([]);
  });
});

describe('a failing install publishes nothing', () => {
  it('marks the node failed with its log and leaves no ref; the others go on under keepGoing', async () => {
    const { catalog, root } = await loadRecipeCatalog(join(recipes, 'fail-env.yaml'));
    const rows = await executePlan(planRecipe(catalog, root.source, 'test/failing'), opts);
    const failed = rows.find((r) => r.kind === 'env')!;
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/exit status 3/);
    expect(readFileSync(failed.log!, 'utf8')).toContain('minisandbox: command [2/2] failed');
    expect(rows.find((r) => r.kind === 'base')?.status).toBe('cached');
    expect(await reg.getRef('test/failing')).toBeNull();
    for await (const r of reg.listRefs()) expect(r.name).not.toMatch(/failing/);
  });

  it('a malformed dataset line is named', async () => {
    const bad = join(work, 'bad.jsonl');
    writeFileSync(bad, `${readFileSync(join(recipes, 'dataset.jsonl'), 'utf8').split('\n')[0]}\n{"instance_id": "x"\n`);
    await expect(loadDataset(bad)).rejects.toThrow(/bad\.jsonl:2/);
  });
});
