/**
 * Scoring through the real sandbox runtime: every evaluation in a fresh rootless sandbox (network
 * off) over a Debian layer plus an instance layer holding the repository at its base commit, for
 * an instance of the hermetic recipes/test dataset.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs, lookupSpec } from '../dataset/specs.js';
import { createSandbox, listSandboxes, shiftCopyTree, type HostInfo } from '../sandbox/index.js';
import { CACHE_DIR, debianLower, freshStateDir, hostInfo } from '../../test/helpers/sandbox-testkit.js';
import { evalSpecFromDataset } from './dataset-spec.js';
import { parseScoreInstance, type ScoreInstance } from './instance.js';
import { asEvalSandbox, sandboxEvalRunner } from './sandbox-runner.js';
import { scoreInstance } from './score-instance.js';
import type { EvalSpecInput } from './spec.js';

const RECIPES = resolve(import.meta.dirname, '../../recipes/test');
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

let host: HostInfo;
let lowers: string[];
let stateDir: string;
let work: string;
let instance: ScoreInstance;
let spec: EvalSpecInput;
let created = 0;

beforeAll(async () => {
  host = await hostInfo();
  const debian = await debianLower(host.idMap);
  work = await mkdtemp(join(tmpdir(), 'score-sbx-real-'));
  const origin = join(work, 'origin');
  execFileSync(join(RECIPES, 'make-repo.sh'), [origin], { stdio: ['ignore', 'ignore', 'inherit'] });
  const row = (await loadDataset(join(RECIPES, 'dataset.jsonl')))[0]!.row;
  instance = parseScoreInstance(row);
  const specs = await loadSpecs(join(RECIPES, 'specs.yaml'));
  spec = evalSpecFromDataset(lookupSpec(specs, row.repo, row.version, row.instance_id));
  // The instance layer: the repository at its base commit, at the spec's workdir.
  const layer = join(work, 'layer');
  const testbed = join(layer, (spec.workdir ?? '/testbed').slice(1));
  execFileSync('git', ['clone', '-q', '--no-checkout', origin, testbed], { env: GIT_ENV });
  execFileSync('git', ['checkout', '-q', instance.base_commit], { cwd: testbed, env: GIT_ENV });
  const shifted = await shiftCopyTree(layer, join(CACHE_DIR, `score-layer-${process.pid}-${host.idMap.uidStart}`), host.idMap);
  lowers = [debian, shifted];
  stateDir = await freshStateDir();
}, 600_000);
afterAll(async () => {
  if (stateDir !== undefined) await rm(stateDir, { recursive: true, force: true });
  if (lowers?.[1] !== undefined) await rm(lowers[1], { recursive: true, force: true });
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

const runner = () =>
  sandboxEvalRunner(async () => {
    created++;
    return asEvalSandbox(await createSandbox({ lowerDirs: lowers, stateDir, network: 'none', config: { workdir: spec.workdir ?? '/testbed' } }, { host }));
  });

describe('scoring in real sandboxes', () => {
  it('gold resolves and an empty patch does not, each in its own fresh sandbox', async () => {
    const before = created;
    const gold = await scoreInstance(instance, spec, instance.patch, runner(), { timeoutMs: 120_000 });
    expect(gold.result).toMatchObject({ status: 'completed', resolved: true, applied_with: 'git apply --verbose' });
    // Had the gold run's changes survived, the empty patch would see the fix.
    const empty = await scoreInstance(instance, spec, null, runner(), { timeoutMs: 120_000 });
    expect(empty.result).toMatchObject({ status: 'completed', resolved: false });
    expect(empty.result.report.tests_status?.FAIL_TO_PASS.failure).toEqual(instance.FAIL_TO_PASS);
    expect(created - before).toBe(2);
  });

  it('a hanging test command times out and its sandbox is gone', async () => {
    const { result } = await scoreInstance(instance, { ...spec, testCmd: 'sleep 600; #' }, instance.patch, runner(), { timeoutMs: 3_000 });
    // `sleep 600` outlives this file's timeout: only the kill at 3 s lets the test end
    expect(result.status).toBe('timeout');
    expect((await listSandboxes(stateDir)).filter((l) => l.live)).toEqual([]);
  });
});
