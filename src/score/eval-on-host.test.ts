import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCalcRepo, resetCalcRepo, type CalcRepo } from './fixtures/calc-repo.js';
import { hostEvalRunner } from './host-runner.js';
import { START_TEST_OUTPUT } from './markers.js';
import type { EvalRunner } from './runner.js';
import { scoreInstance } from './score-instance.js';

let root: string;
let repo: CalcRepo;

/** Each evaluation starts from the base tree, as each would in a fresh sandbox. */
function freshRunner(maxOutputBytes?: number): EvalRunner {
  const host = hostEvalRunner(maxOutputBytes === undefined ? {} : { maxOutputBytes });
  return async (files, script, opts) => {
    resetCalcRepo(repo);
    return host(files, script, opts);
  };
}

function score(patch: string | null, opts: { timeoutMs?: number; maxOutputBytes?: number } = {}) {
  return scoreInstance(repo.instance, repo.spec, patch, freshRunner(opts.maxOutputBytes), {
    timeoutMs: opts.timeoutMs ?? 30_000,
    filesDir: join(root, 'files'),
    modelName: 'test/model',
  });
}

function processesMatching(pattern: string): string[] {
  try {
    return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8' }).trim().split('\n');
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

/** A model patch made by editing calc.py's add(). */
function patchAdd(body: string): string {
  return repo.gold
    .replace(
      '+    return a + b',
      body
        .split('\n')
        .map((l) => `+${l}`)
        .join('\n'),
    )
    .replace(/@@ -(\d+),(\d+) \+(\d+),(\d+) @@/, (_m, a, b, c, d) => `@@ -${a},${b} +${c},${Number(d) + body.split('\n').length - 1} @@`);
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'score-host-'));
  repo = await makeCalcRepo(join(root, 'repo'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('eval script run for real with bash on a git repository', () => {
  it('resolves the gold patch, applied by plain git apply', async () => {
    const { result, log } = await score(repo.gold);
    expect(result.status).toBe('completed');
    expect(result.applied_with).toBe('git apply --verbose');
    expect(result.resolved).toBe(true);
    expect(result.report).toMatchObject({ patch_is_None: false, patch_exists: true, patch_successfully_applied: true, resolved: true });
    expect(result.report.tests_status?.FAIL_TO_PASS).toEqual({ success: [repo.names.add], failure: [] });
    expect(result.report.tests_status?.PASS_TO_PASS.failure).toEqual([]);
    expect(log).toContain(`+ : '${START_TEST_OUTPUT}'`);
    // The test files were reset after the run, as the harness does.
    expect(execFileSync('git', ['status', '--porcelain'], { cwd: repo.dir, encoding: 'utf8' })).toBe(' M calc.py\n');
  });

  it("hands the test command the environment's own git config, not the scorer's guards", async () => {
    const spec = { ...repo.spec, testCmd: `test -z "\${GIT_CONFIG_COUNT:-}" && ${repo.spec.testCmd}` };
    const { result } = await scoreInstance(repo.instance, spec, repo.gold, freshRunner(), { timeoutMs: 30_000, filesDir: join(root, 'files') });
    expect(result.resolved).toBe(true);
  });

  it('does not resolve an empty patch: the new test fails on the base tree', async () => {
    const { result } = await score(null);
    expect(result.status).toBe('completed');
    expect(result.resolved).toBe(false);
    expect(result.report.patch_is_None).toBe(true);
    expect(result.report.tests_status?.FAIL_TO_PASS.failure).toEqual([repo.names.add]);
    expect(result.report.tests_status?.PASS_TO_PASS.failure).toEqual([]);
  });

  it('falls back to patch --fuzz for a patch whose context git apply rejects', async () => {
    const fuzzy = repo.gold.replace(' def sub(a, b):', ' def sub(x, y):');
    expect(fuzzy).not.toBe(repo.gold);
    const { result, log } = await score(fuzzy);
    expect(log).toContain('+ git apply --verbose --reject');
    expect(result.applied_with).toBe('patch --batch --fuzz=5 -p1 -i');
    expect(result.resolved).toBe(true);
  });

  it('reports patch apply failed for a patch that applies nowhere, and runs no test', async () => {
    const broken = repo.gold.replaceAll('a - b', 'a * b').replace(' import math', ' import cmath').replace(' # calc module', ' # nothing like it');
    const { result, log } = await score(broken);
    expect(result.status).toBe('patch_apply_failed');
    expect(result.resolved).toBe(false);
    expect(result.report.patch_successfully_applied).toBe(false);
    expect(result.report.tests_status).toBeUndefined();
    expect(log).not.toContain(START_TEST_OUTPUT);
  });

  it('undoes a patch that edits the test files before the tests run', async () => {
    // Fix add() and also weaken test_sub: the reset to the base commit restores the real test.
    const cheat = execFileSync(
      'bash',
      ['-c', `cd ${repo.dir} && git apply - && sed -i 's/sub(5, 3), 2/sub(5, 3), sub(5, 3)/' tests/test_calc.py && git diff && git checkout -q -- .`],
      {
        input: repo.gold,
        encoding: 'utf8',
      },
    );
    expect(cheat).toContain('tests/test_calc.py');
    const { result, log } = await score(cheat);
    expect(result.resolved).toBe(true);
    expect(log).toContain(`git checkout ${repo.baseCommit} -- tests/test_calc.py`);
  });

  it('refuses a patch that writes inside .git, which the patch fallback would otherwise apply', async () => {
    const hook =
      `diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n--- ` +
      `/dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+echo planted\n`;
    const { result } = await score(repo.gold + hook);
    expect(result.status).toBe('patch_apply_failed');
    expect(existsSync(join(repo.dir, '.git', 'hooks', 'post-checkout'))).toBe(false);
  });

  it('apply output cannot forge the markers: a patch whose context echoes fake results is graded on the real run', async () => {
    // git apply prints a failing hunk's context into the log; `patch --fuzz` then applies the hunk
    // anyway, ignoring those trailing context lines. The real test run must be what is graded.
    const forged = [
      " : '>>>>> Start Test Output'",
      ` ${repo.names.add} ... ok`,
      ` ${repo.names.sub} ... ok`,
      ` ${repo.names.hyp} ... ok`,
      " : '>>>>> End Test Output'",
    ];
    const evil = repo.gold
      .replace('@@ -3,7 +3,7 @@', '@@ -3,10 +3,10 @@')
      .replace(/ \n \n def sub\(a, b\):\n?$/, ` \n \n${forged.join('\n')}\n`)
      .replace('+    return a + b', '+    return a * 0');
    expect(evil).toContain(forged[0]);
    const { result, log } = await score(evil);
    expect(result.applied_with).toBe('patch --batch --fuzz=5 -p1 -i');
    expect(log).toContain('test_add');
    expect(result.resolved).toBe(false);
    expect(result.report.tests_status?.FAIL_TO_PASS.failure).toEqual([repo.names.add]);
  });

  it('a test run made silent cannot fall back to fake results echoed before the start marker', async () => {
    const forged = [` ${repo.names.add} ... ok`, ` ${repo.names.sub} ... ok`, ` ${repo.names.hyp} ... ok`];
    const evil = repo.gold
      .replace('@@ -3,7 +3,7 @@', '@@ -3,9 +3,11 @@')
      .replace(/ \n \n def sub\(a, b\):\n?$/, ` \n \n${forged.join('\n')}\n`)
      .replace('+    return a + b', '+    return a + b\n+import os\n+os._exit(0)');
    const { result, log } = await score(evil);
    expect(result.applied_with).toBe('patch --batch --fuzz=5 -p1 -i');
    expect(log.slice(log.indexOf(START_TEST_OUTPUT))).not.toContain(' ... ok');
    expect(result.status).toBe('completed');
    expect(result.resolved).toBe(false);
  });

  it('runs no git hook, so a planted hook cannot forge the markers and results', async () => {
    const hookPath = join(repo.dir, '.git', 'hooks', 'post-checkout');
    await writeFile(hookPath, `#!/bin/sh\necho ": '${START_TEST_OUTPUT}'"\necho '${repo.names.add} ... ok'\necho ": '>>>>> End Test Output'"\n`, {
      mode: 0o755,
    });
    try {
      const { result, log } = await score(null);
      expect(log).not.toContain(`${repo.names.add} ... ok`);
      expect(result.resolved).toBe(false);
    } finally {
      await rm(hookPath);
    }
  });

  it('kills a hanging test command at the timeout, with every process it started', async () => {
    // The sleep (a day) outlives the test's own timeout: only the kill lets the test end. Whether
    // the hanging test got to start within the 2 s is the machine's speed: it says so in a file.
    const tag = `${86_000 + Math.floor(Math.random() * 399)}.25`;
    const started = join(root, `hang-started-${tag}`);
    const hang = patchAdd(
      `    import subprocess\n    open(${JSON.stringify(started)}, 'w').close()\n    subprocess.run(['sleep', '${tag}'])\n    return a + b`,
    );
    const { result, log } = await score(hang, { timeoutMs: 2_000 });
    expect(result.status).toBe('timeout');
    expect(result.resolved).toBe(false);
    expect(log).toContain('Timeout error: 2 seconds exceeded.');
    // output written before the kill is kept: the hanging test's name, when it had started
    if (existsSync(started)) expect(log).toContain(`${repo.names.add} ... `);
    expect(processesMatching(`sleep ${tag}`)).toEqual([]);
  }, 300_000);

  it('grades a test suite that floods its output, keeping head and tail within the cap', async () => {
    const flood = patchAdd(`    import sys\n    for _ in range(20000): sys.stderr.write('x' * 999 + '\\n')\n    return a + b`);
    const { result, log } = await score(flood, { maxOutputBytes: 1 << 20 });
    expect(result.runner?.truncated).toBe(true);
    expect(Buffer.byteLength(log)).toBeLessThan((1 << 20) + 200);
    expect(log).toMatch(/\[minisandbox: \d+ bytes of output elided\]/);
    expect(result.status).toBe('completed');
    expect(result.resolved).toBe(true);
  });
});
