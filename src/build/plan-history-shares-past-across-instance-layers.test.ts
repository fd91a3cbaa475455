import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkoutInstance, hasObject } from '../recipe/checkout.js';
import type { InstanceRecipe } from '../recipe/schema.js';
import { loadDatasetPlan } from './plan-load.js';
import { historyPath } from './plan-history.js';

const DEMO = resolve(import.meta.dirname, '../../recipes/demo');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const UNSHARE = process.getuid?.() === 0 ? ['unshare', '--mount', '--propagation', 'private'] : ['unshare', '--user', '--map-root-user', '--mount', '--propagation', 'private'];
let work: string;

/** `git` in `root`'s checkout as the sandbox sees it: the layer's /opt mounted at /opt (private mount namespace). */
function gitInLayer(root: string, ...args: string[]): { status: number | null; stdout: string } {
  const script = 'mount -t tmpfs tmpfs /opt && mkdir -p /opt/minisandbox && mount --bind "$1/opt/minisandbox" /opt/minisandbox && shift && exec git -C "$0/testbed" "$@"';
  const r = spawnSync(UNSHARE[0]!, [...UNSHARE.slice(1), 'sh', '-c', script, root, root, ...args], { encoding: 'utf8', env: GIT_ENV });
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
  it('plans the merge base of the dataset, and the instance layers get byte-identical stores holding no future', async () => {
    const plan = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos') });
    const instances = plan.nodes.filter((n) => n.recipe.kind === 'instance').map((n) => n.recipe as InstanceRecipe);
    const first = instances[0]!;
    expect(first.history).toEqual({ base: first.commit, path: historyPath('demo/pycalc') }); // the oldest base is the merge base
    expect(new Set(instances.map((r) => r.history?.base)).size).toBe(1);
    const unshared = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos'), sharedHistory: false });
    expect(unshared.nodes.some((n) => n.recipe.kind === 'instance' && n.recipe.history !== undefined)).toBe(false);

    const roots: string[] = [];
    const cache = join(work, 'history-cache');
    for (const [i, r] of [instances[1]!, instances[3]!, instances[2]!].entries()) {
      const root = await mkdtemp(join(work, 'layer-'));
      // The first makes its store directly, the others through (and then from) the host cache.
      await checkoutInstance(r, root, i === 0 ? {} : { historyCache: cache });
      roots.push(root);
      const log = gitInLayer(root, 'log', '--format=%H');
      expect(log.status).toBe(0);
      expect(log.stdout.trim().split('\n')[0]).toBe(r.commit);
      expect(gitInLayer(root, 'fsck', '--no-dangling').status).toBe(0);
      expect(gitInLayer(root, 'status', '--porcelain').stdout).toBe('');
      const fix = execFileSync('git', ['-C', join(work, 'repos/demo/pycalc'), 'rev-list', '--reverse', '--ancestry-path', `${r.commit}..main`], { encoding: 'utf8', env: GIT_ENV }).split('\n')[0]!;
      expect(await hasObject(join(root, 'opt/minisandbox/history/demo/pycalc.git'), fix)).toBe(false);
    }
    expect(treeHashes(join(roots[0]!, 'opt'))).toBe(treeHashes(join(roots[1]!, 'opt')));
    expect(treeHashes(join(roots[2]!, 'opt'))).toBe(treeHashes(join(roots[1]!, 'opt')));
    expect(await readdir(cache)).toEqual([`${first.commit}.git`]);
  });

  it('refuses a history base that is not an ancestor of the commit', async () => {
    const plan = await loadDatasetPlan({ dataset: join(DEMO, 'dataset.jsonl'), specs: join(DEMO, 'specs.yaml'), repos: join(work, 'repos') });
    const [a, , , d] = plan.nodes.filter((n) => n.recipe.kind === 'instance').map((n) => n.recipe as InstanceRecipe);
    const bad: InstanceRecipe = { ...a!, history: { base: d!.commit, path: historyPath('demo/pycalc') } };
    await expect(checkoutInstance(bad, await mkdtemp(join(work, 'bad-')))).rejects.toThrow(/is not an ancestor/);
  });
});
