import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkoutInstance, hasObject, makeHistoryLayer } from '../recipe/checkout.js';
import type { HistoryRecipe, InstanceRecipe } from '../recipe/schema.js';
import { loadDatasetPlan } from './plan-load.js';
import { historyPath } from './plan-history.js';

const DEMO = resolve(import.meta.dirname, '../../recipes/demo');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const UNSHARE =
  process.getuid?.() === 0
    ? ['unshare', '--mount', '--propagation', 'private']
    : ['unshare', '--user', '--map-root-user', '--mount', '--propagation', 'private'];
let work: string;

/**
 * `git` in `root`'s checkout as the sandbox sees it: the history layer's /opt mounted at /opt
 * (private mount namespace), the instance layer's /testbed where it is.
 */
function gitInLayer(history: string, root: string, ...args: string[]): { status: number | null; stdout: string } {
  const script =
    'mount -t tmpfs tmpfs /opt && mkdir -p /opt/minisandbox && mount --bind "$1/opt/minisandbox" /opt/minisandbox && shift && exec git -C "$0/testbed" "$@"';
  const r = spawnSync(UNSHARE[0]!, [...UNSHARE.slice(1), 'sh', '-c', script, root, history, ...args], { encoding: 'utf8', env: GIT_ENV });
  return { status: r.status, stdout: r.stdout };
}

/** sha256 of every file under a directory, by relative path. */
const treeHashes = (dir: string): string => execFileSync('sh', ['-c', 'cd "$1" && find . -type f | sort | xargs sha256sum', 'sh', dir], { encoding: 'utf8' });

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'plan-history-'));
  execFileSync(join(DEMO, 'make-repo.sh'), [join(work, 'repos', 'demo', 'pycalc')]);
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('shared history in instance layers', () => {
  it(
    'plans the merge base of the dataset as a history layer every instance stacks ' +
      'on, byte-identical however made, with no future in it or in the checkouts',
    async () => {
      const plan = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos') });
      const instances = plan.nodes.filter((n) => n.recipe.kind === 'instance').map((n) => n.recipe as InstanceRecipe);
      const first = instances[0]!;
      expect(first.history).toEqual({ base: first.commit, path: historyPath('demo/pycalc') }); // the oldest base is the merge base
      expect(new Set(instances.map((r) => r.history?.base)).size).toBe(1);
      const unshared = await loadDatasetPlan({
        dataset: join(DEMO, 'dataset.jsonl'),
        specs: join(DEMO, 'specs.yaml'),
        repos: join(work, 'repos'),
        sharedHistory: false,
      });
      expect(unshared.nodes.some((n) => n.recipe.kind === 'instance' && n.recipe.history !== undefined)).toBe(false);

      // Instances stack on a history node of their repository, itself on their env: one per env
      // (the demo has two versions), all of the same recipe, so the same layer.
      const envs = plan.nodes.filter((n) => n.kind === 'env');
      const histories = plan.nodes.filter((n) => n.kind === 'history');
      expect(histories.map((h) => h.parent).sort()).toEqual(envs.map((e) => e.id).sort());
      expect(new Set(histories.map((h) => h.recipeDigest)).size).toBe(1);
      for (const n of plan.nodes.filter((m) => m.kind === 'instance')) expect(histories.map((h) => h.id)).toContain(n.parent);
      expect(histories.flatMap((h) => h.instanceIds).sort()).toEqual(
        plan.nodes
          .filter((m) => m.kind === 'instance')
          .map((m) => m.label)
          .sort(),
      );
      const history = histories[0]!;
      const hr = history.recipe as HistoryRecipe;

      // The history layer made directly and through (then from) the host cache: the same bytes.
      const cache = join(work, 'history-cache');
      const layers = [await mkdtemp(join(work, 'history-')), await mkdtemp(join(work, 'history-')), await mkdtemp(join(work, 'history-'))];
      await makeHistoryLayer(hr, layers[0]!);
      await makeHistoryLayer(hr, layers[1]!, { historyCache: cache });
      await makeHistoryLayer(hr, layers[2]!, { historyCache: cache });
      expect(treeHashes(join(layers[0]!, 'opt'))).toBe(treeHashes(join(layers[1]!, 'opt')));
      expect(treeHashes(join(layers[2]!, 'opt'))).toBe(treeHashes(join(layers[1]!, 'opt')));
      expect(await readdir(cache)).toEqual([`${first.commit}.git`]);
      const hl = layers[0]!;
      const historyObjects = join(hl, hr.path, 'objects');

      for (const r of [instances[1]!, instances[3]!, instances[2]!]) {
        const root = await mkdtemp(join(work, 'layer-'));
        await checkoutInstance(r, root, { historyObjects });
        // the instance layer holds its checkout only; the history is the layer below
        expect(await readdir(root)).toEqual(['testbed']);
        const log = gitInLayer(hl, root, 'log', '--format=%H');
        expect(log.status).toBe(0);
        expect(log.stdout.trim().split('\n')[0]).toBe(r.commit);
        expect(gitInLayer(hl, root, 'fsck', '--no-dangling').status).toBe(0);
        expect(gitInLayer(hl, root, 'status', '--porcelain').stdout).toBe('');
        const fix = execFileSync('git', ['-C', join(work, 'repos/demo/pycalc'), 'rev-list', '--reverse', '--ancestry-path', `${r.commit}..main`], {
          encoding: 'utf8',
          env: GIT_ENV,
        }).split('\n')[0]!;
        expect(await hasObject(join(hl, 'opt/minisandbox/history/demo/pycalc.git'), fix)).toBe(false);
        expect(await hasObject(join(root, 'testbed'), fix)).toBe(false);
      }
    },
  );

  it('an instance with a shared history needs the history store', async () => {
    const plan = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos') });
    const r = plan.nodes.find((n) => n.recipe.kind === 'instance')!.recipe as InstanceRecipe;
    await expect(checkoutInstance(r, await mkdtemp(join(work, 'none-')))).rejects.toThrow(/no history store was given/);
  });

  it('refuses a history base that is not an ancestor of the commit', async () => {
    const plan = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos') });
    const [a, , , d] = plan.nodes.filter((n) => n.recipe.kind === 'instance').map((n) => n.recipe as InstanceRecipe);
    const bad: InstanceRecipe = { ...a!, history: { base: d!.commit, path: historyPath('demo/pycalc') } };
    const hl = await mkdtemp(join(work, 'bad-history-'));
    await makeHistoryLayer({ kind: 'history', parent: { recipe: 'x' }, repo: a!.repo, base: d!.commit, path: historyPath('demo/pycalc') }, hl);
    await expect(checkoutInstance(bad, await mkdtemp(join(work, 'bad-')), { historyObjects: join(hl, historyPath('demo/pycalc'), 'objects') })).rejects.toThrow(
      /is not an ancestor/,
    );
  });
});
