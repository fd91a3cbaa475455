import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { defaultRepoSource, indexPlan, planDataset } from './plan.js';
import { effectiveEnv, runtimeConfigFor } from './plan-runtime.js';

const DEMO = resolve(import.meta.dirname, '../../recipes/demo');

describe('runtimeConfigFor', () => {
  it('stacks env vars up the recipe chain, upper wins, and takes workdir and test command from the instance', async () => {
    const specs = await loadSpecs(resolve(DEMO, 'specs.yaml'));
    const rows = await loadDataset(resolve(DEMO, 'dataset.jsonl'));
    const plan = planDataset({ dataset: 'demo', rows, specs, repoSource: defaultRepoSource('/repos') });
    const index = indexPlan(plan);
    const rc = runtimeConfigFor(index, 'instance:demo__pycalc-3', {
      workdir: '/',
      env: { PATH: '/usr/bin:/bin', DEBIAN_FRONTEND: 'x' },
      user: { uid: 0, gid: 0 },
      hostname: 'sandbox',
      labels: {},
    });
    expect(rc.workdir).toBe('/testbed');
    expect(rc.testCmd).toBe('python3 -m pytest -rA -p no:cacheprovider');
    // env-0.1 sets DEBIAN_FRONTEND and PYTHONDONTWRITEBYTECODE, env-0.2 (above it) PYTHONHASHSEED.
    expect(rc.env).toEqual({ PATH: '/usr/bin:/bin', DEBIAN_FRONTEND: 'noninteractive', PYTHONDONTWRITEBYTECODE: '1', PYTHONHASHSEED: '0' });
    expect(rc.labels).toEqual({ 'minisandbox.instance_id': 'demo__pycalc-3', 'minisandbox.log_parser': 'pytest' });
    expect(effectiveEnv(index, 'instance:demo__pycalc-1')).not.toHaveProperty('PYTHONHASHSEED');
  });
});
