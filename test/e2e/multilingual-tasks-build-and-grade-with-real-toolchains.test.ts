/**
 * Beyond Python, for real: small projects in C (make, a Tcl-driven runner as redis has), JavaScript
 * (jest, vitest and mocha installed by `npm ci` from the npm registry), Go and Rust (standard
 * libraries only), with rows in SWE-bench Multilingual's, Multi-SWE-bench's and SWE-smith's
 * formats (recipes/multilang). Each is built with its toolchain from Debian's mirror in a build
 * sandbox, then graded: the gold patch resolves, the empty one does not, and one that breaks a
 * PASS_TO_PASS test does not, with its report pinned.
 *
 * Cost: one Debian base (the test suite's shared rootfs, as a tarball, not a second debootstrap),
 * one apt layer for the four toolchains, one `npm ci`, six instances and 18 graded runs.
 * Java (Maven, offline from Debian's maven-repo), PHP (PHPUnit) and Ruby (RSpec) would add a JDK,
 * PHP and Ruby from apt and their own graded runs, a few minutes the CI cannot spare: they run
 * with MINISANDBOX_E2E_ALL_LANGUAGES=1.
 */
import { execFile } from 'node:child_process';
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { debianTarball } from '../helpers/debian-tarball.js';
import { LocalRegistry } from '../../src/registry/local.js';
import { resolveEnv } from '../../src/registry/resolve-env.js';

const run = promisify(execFile);
const work = mkdtempSync(join(tmpdir(), 'ms-multilang-'));
chmodSync(work, 0o755); // sandboxes' subordinate ids must reach the store below it
const recipes = join(work, 'recipes');
const repos = join(work, 'repos');
const env = { ...process.env, MINISANDBOX_REGISTRY: join(work, 'registry'), MINISANDBOX_STORE: join(work, 'store') };
afterAll(() => rmSync(work, { recursive: true, force: true }));

const CI_IDS = [
  'mlang__ccalc-1',
  'mlang__jsutil-1',
  'mlang__jsutil-2',
  'mlang__jsutil-3',
  'mlang__gostrs.4a366481.func_pm_remove_lower__vowels1',
  'mlang__rsnum-1',
];
const GO = CI_IDS[4]!;

async function ms(args: string[], okCodes = [0]): Promise<unknown> {
  const r = await runCli(['--json', '--progress', 'none', ...args], env);
  if (!okCodes.includes(r.code ?? -1)) throw new Error(`minisandbox ${args.join(' ')} exited ${r.code}: ${r.stderr.slice(-3000)}`);
  return JSON.parse(r.stdout);
}

const dataset = (): string => join(recipes, 'dataset.jsonl');
const specs = (): string => join(recipes, 'specs.yaml');
/** What build, validate and score take for the dataset: its rows, specs, name (tags are multilang/<id>) and the instances. */
const DATASET = (): string[] => [dataset(), '--specs', specs(), '--dataset', 'multilang', '--instances', CI_IDS.join(',')];

beforeAll(async () => {
  cpSync(resolve('recipes/multilang'), recipes, { recursive: true, filter: (src) => !src.includes('/repos') });
  writeFileSync(join(recipes, 'base.yaml'), `kind: base\nname: debian-bookworm-minbase\nfrom:\n  type: tarball\n  path: ${await debianTarball()}\n`);
  await run(resolve('recipes/multilang/make-repos.sh'), [repos]);
}, 600_000);

interface Node {
  kind: string;
  label: string;
  status: string;
  env?: string;
  log?: string;
  tag?: string;
}

describe('multilingual tasks: build with real toolchains, grade with real test runners', { timeout: 1_200_000 }, () => {
  it("builds each language's environment with its installer, npm ci once for three instances", async () => {
    const out = (await ms(['build', ...DATASET(), '--repos', repos, '--jobs', '2'])) as {
      counts: Record<string, number>;
      summary: Record<string, number>;
      nodes: Node[];
    };
    // one base, the toolchains and one env per project's dependencies above them (the C project
    // needs none), a history layer per repository, six instances
    expect(out.counts).toEqual({ base: 1, env: 4, history: 4, instance: 6 });
    expect(out.summary).toMatchObject({ built: 15, failed: 0, skipped: 0 });
    const js = out.nodes.filter((n) => n.label === 'jsutil-deps');
    expect(js).toHaveLength(1);
    const jsLog = readFileSync(js[0]!.log!, 'utf8');
    // through this machine's egress (a proxy signing with its own CA): the host's bundle came in
    expect(jsLog).toMatch(/^host network settings: .*NODE_EXTRA_CA_CERTS.* \(the host's CA bundle at \/\.minisandbox-host\/ca-certificates\.crt\)$/m);
    expect(jsLog).toMatch(/^added \d{3} packages in /m);
    // the three JavaScript instances stack on that one install: their own layers hold checkouts only
    const reg = new LocalRegistry(env.MINISANDBOX_REGISTRY);
    const deps = (await resolveEnv(reg, js[0]!.env!)).config.layers.at(-1)!.digest;
    for (const id of ['mlang__jsutil-1', 'mlang__jsutil-2', 'mlang__jsutil-3']) {
      const layers = (await resolveEnv(reg, `multilang/${id}`)).config.layers.map((l) => l.digest);
      expect(layers).toContain(deps);
      const own = out.nodes.find((n) => n.label === id)!;
      expect(own.status).toBe('built');
      expect(readFileSync(own.log!, 'utf8')).not.toMatch(/npm/);
    }
    // the C instance compiled at its commit, into its own layer
    const c = (await ms(['run', 'multilang/mlang__ccalc-1', '--', 'sh', '-c', 'test -x calc && ./calc gcd 12 18 && ls calc.o main.o'])) as {
      stdout: string;
      exitCode: number;
    };
    expect(c).toMatchObject({ exitCode: 0, stdout: '6\ncalc.o\nmain.o\n' });
  });

  it('gold patches resolve and empty ones do not, every runner really run', async () => {
    const v = (await ms(['validate', ...DATASET(), '--jobs', '2'])) as {
      ok_ids: string[];
      failures: unknown[];
    };
    expect(v.failures).toEqual([]);
    expect(v.ok_ids.sort()).toEqual([...CI_IDS].sort());
  });

  it('a patch that fixes the bug and breaks a PASS_TO_PASS test does not resolve; its report says which', async () => {
    const reports = join(work, 'reports');
    const predictions = join(recipes, 'breaking-predictions.jsonl');
    const s = (await ms(['score', ...DATASET(), '--predictions', predictions, '--run-id', 'breaks', '--report-dir', reports, '--jobs', '2'])) as {
      summary: { completed_ids: string[]; resolved_ids: string[] };
    };
    expect(s.summary.resolved_ids).toEqual([]);
    expect(s.summary.completed_ids.sort()).toEqual([...CI_IDS].sort());
    const report = (id: string) => {
      const r = JSON.parse(readFileSync(join(reports, 'breaks', 'breaks-p2p', id, 'report.json'), 'utf8')) as Record<string, unknown>;
      return r[id];
    };
    const tests = (f2p: string[], p2pOk: string[], p2pBroken: string[]) => ({
      patch_is_None: false,
      patch_exists: true,
      patch_successfully_applied: true,
      resolved: false,
      tests_status: {
        FAIL_TO_PASS: { success: f2p, failure: [] },
        PASS_TO_PASS: { success: p2pOk, failure: p2pBroken },
        FAIL_TO_FAIL: { success: [], failure: [] },
        PASS_TO_FAIL: { success: [], failure: [] },
      },
    });
    expect(report('mlang__ccalc-1')).toEqual(
      tests(
        ['sum_digits of a negative number'],
        ['clamp keeps a value in range', 'clamp lowers a value above the range', 'gcd of 12 and 18', 'sum_digits of 1234'],
        ['clamp raises a value below the range'],
      ),
    );
    expect(report('mlang__jsutil-1')).toEqual(
      tests(['is at most n characters long'], ['leaves a long string alone', 'keeps a short string'], ['pads a short string']),
    );
    expect(report('mlang__jsutil-2')).toEqual(
      tests(
        ['vitest/strings.test.mjs > capitalize an empty string > gives an empty string'],
        ['vitest/strings.test.mjs > capitalize > capitalizes a word'],
        ['vitest/strings.test.mjs > padLeft > pads with spaces by default'],
      ),
    );
    expect(report('mlang__jsutil-3')).toEqual(
      tests(['words between runs of spaces has no empty words'], ['words splits a sentence'], ['capitalize keeps the rest of the word']),
    );
    expect(report(GO)).toEqual(tests(['TestCountVowels'], ['TestReverse', 'TestIsPalindrome/racecar'], ['TestIsPalindrome', 'TestIsPalindrome/Level']));
    expect(report('mlang__rsnum-1')).toEqual(tests(['zero_and_one_are_not_prime'], ['primes_below_ten', 'digits_of_a_number'], ['fib_small', 'fib_zero']));
  });
});
