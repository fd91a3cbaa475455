/**
 * Regenerates recipes/multilang/dataset.jsonl and breaking-predictions.jsonl from the projects
 * make-repos.sh generates, each row in the format of the dataset it stands for:
 *
 * - C and JavaScript: SWE-bench Multilingual rows (SWE-bench's schema);
 * - Rust: a Multi-SWE-bench row (`org`, `repo`, `number`, `base.sha`, `fix_patch`, per-test maps);
 * - Go: a SWE-smith task instance (the bug patch, its commit as base, an `image_name`).
 *
 * The test lists are what each runner prints for the project's tests (the e2e test grades the
 * gold patch, which must resolve, and the empty one, which must not). breaking-predictions.jsonl
 * holds, per instance, the gold patch plus a change that breaks a PASS_TO_PASS test (the
 * "Break #N" commits): a patch a scorer must not call resolved.
 *
 *   npx tsx recipes/multilang/make-dataset.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' };

const out = mkdtempSync(join(tmpdir(), 'multilang-'));
execFileSync(join(here, 'make-repos.sh'), [out], { stdio: 'ignore' });
const git = (repo: string, ...args: string[]): string => execFileSync('git', ['-C', join(out, repo), ...args], { env: GIT_ENV, encoding: 'utf8' });
const sha = (repo: string, rev: string): string => git(repo, 'rev-parse', rev).trim();
/** The commit whose subject starts with `subject`, on any branch. */
const commitOf = (repo: string, subject: string): string => {
  const line = git(repo, 'log', '--all', '--format=%H %s')
    .split('\n')
    .find((l) => l.slice(41).startsWith(subject));
  if (line === undefined) throw new Error(`${repo}: no commit "${subject}"`);
  return line.slice(0, 40);
};
/** `git diff a b` limited to (or without) the test paths. */
const diff = (repo: string, a: string, b: string, tests: string[], side: 'tests' | 'code'): string =>
  git(repo, 'diff', a, b, '--', ...(side === 'tests' ? tests : ['.', ...tests.map((t) => `:(exclude)${t}`)]));

interface SweBenchTask {
  repo: string;
  instance: number;
  version: string;
  tests: string[];
  problem: string;
  f2p: string[];
  p2p: string[];
}

const rows: Record<string, unknown>[] = [];
const breaking: Record<string, unknown>[] = [];
const swebench = (t: SweBenchTask): void => {
  const fix = commitOf(t.repo, `Fix #${t.instance}:`);
  const base = sha(t.repo, `${fix}^`);
  const id = `${t.repo.replace('/', '__')}-${t.instance}`;
  rows.push({
    repo: t.repo,
    instance_id: id,
    base_commit: base,
    patch: diff(t.repo, base, fix, t.tests, 'code'),
    test_patch: diff(t.repo, base, fix, t.tests, 'tests'),
    problem_statement: t.problem,
    hints_text: '',
    created_at: '2024-07-01T00:00:00Z',
    version: t.version,
    FAIL_TO_PASS: JSON.stringify(t.f2p),
    PASS_TO_PASS: JSON.stringify(t.p2p),
    environment_setup_commit: base,
  });
  breaking.push({
    instance_id: id,
    model_name_or_path: 'breaks-p2p',
    model_patch: diff(t.repo, base, commitOf(t.repo, `Break #${t.instance}:`), t.tests, 'code'),
  });
};

swebench({
  repo: 'mlang/ccalc',
  instance: 1,
  version: '0.1',
  tests: ['tests'],
  problem: '`calc sum_digits -123` prints 0; the sum of the digits of a negative number is that of its absolute value, 6.',
  f2p: ['sum_digits of a negative number'],
  p2p: [
    'clamp keeps a value in range',
    'clamp raises a value below the range',
    'clamp lowers a value above the range',
    'gcd of 12 and 18',
    'sum_digits of 1234',
  ],
});
swebench({
  repo: 'mlang/jsutil',
  instance: 1,
  version: 'jest',
  tests: ['jest', 'vitest', 'mocha'],
  problem: "`truncate('abcdefghij', 6)` returns 'abcdef...', nine characters: the ellipsis should count in the length.",
  f2p: ['is at most n characters long'],
  p2p: ['pads a short string', 'leaves a long string alone', 'keeps a short string'],
});
swebench({
  repo: 'mlang/jsutil',
  instance: 2,
  version: 'vitest',
  tests: ['jest', 'vitest', 'mocha'],
  problem: "`capitalize('')` throws a TypeError; it should return ''.",
  f2p: ['vitest/strings.test.mjs > capitalize an empty string > gives an empty string'],
  p2p: ['vitest/strings.test.mjs > capitalize > capitalizes a word', 'vitest/strings.test.mjs > padLeft > pads with spaces by default'],
});
swebench({
  repo: 'mlang/jsutil',
  instance: 3,
  version: 'mocha',
  tests: ['jest', 'vitest', 'mocha'],
  problem: "`words('a   b')` returns ['a', '', '', 'b']; runs of spaces should separate words once.",
  f2p: ['words between runs of spaces has no empty words'],
  p2p: ['words splits a sentence', 'capitalize keeps the rest of the word'],
});

// Rust, as Multi-SWE-bench publishes its rows
{
  const repo = 'mlang/rsnum';
  const tests = ['tests'];
  const fix = commitOf(repo, 'Fix #1:');
  const base = sha(repo, `${fix}^`);
  const t = (run: string, test: string, fixed: string) => ({ run, test, fix: fixed });
  const p2p = ['fib_small', 'fib_zero', 'primes_below_ten', 'digits_of_a_number'];
  const result = (passed: string[], failed: string[]) => ({
    passed_count: passed.length,
    failed_count: failed.length,
    skipped_count: 0,
    passed_tests: passed,
    failed_tests: failed,
    skipped_tests: [],
  });
  rows.push({
    org: 'mlang',
    repo: 'rsnum',
    number: 1,
    state: 'closed',
    title: 'is_prime: 0 and 1 are not prime',
    body: 'Fixes #2',
    base: { label: 'mlang:main', ref: 'main', sha: base },
    resolved_issues: [{ number: 2, title: 'is_prime(1) is true', body: '`is_prime(0)` and `is_prime(1)` return true; neither is a prime number.' }],
    fix_patch: diff(repo, base, fix, tests, 'code'),
    test_patch: diff(repo, base, fix, tests, 'tests'),
    fixed_tests: { zero_and_one_are_not_prime: t('NONE', 'FAIL', 'PASS') },
    p2p_tests: Object.fromEntries(p2p.map((n) => [n, t('PASS', 'PASS', 'PASS')])),
    f2p_tests: { zero_and_one_are_not_prime: t('NONE', 'FAIL', 'PASS') },
    s2p_tests: {},
    n2p_tests: {},
    run_result: result(p2p, []),
    test_patch_result: result(p2p, ['zero_and_one_are_not_prime']),
    fix_patch_result: result([...p2p, 'zero_and_one_are_not_prime'], []),
  });
  breaking.push({ instance_id: 'mlang__rsnum-1', model_name_or_path: 'breaks-p2p', model_patch: diff(repo, base, commitOf(repo, 'Break #1:'), tests, 'code') });
}

// Go, as SWE-smith publishes its task instances: the mirror is named for its upstream commit
{
  const mirror = readdirSync(join(out, 'swesmith')).find((n) => n.startsWith('mlang__gostrs.'));
  if (mirror === undefined) throw new Error('make-repos.sh made no swesmith/mlang__gostrs.* mirror');
  const repo = `swesmith/${mirror}`;
  const bug = commitOf(repo, 'Bug Patch');
  const upstream = sha(repo, `${bug}^`);
  const id = `${mirror}.func_pm_remove_lower__vowels1`;
  rows.push({
    instance_id: id,
    repo,
    patch: git(repo, 'diff', upstream, bug),
    FAIL_TO_PASS: ['TestCountVowels'],
    PASS_TO_PASS: ['TestReverse', 'TestIsPalindrome', 'TestIsPalindrome/racecar', 'TestIsPalindrome/Level'],
    created_at: '2025-04-01T00:00:00',
    image_name: `jyangballin/swesmith.x86_64.${mirror.replace('__', '_1776_').toLowerCase()}`,
    base_commit: bug,
    problem_statement: '`CountVowels("Education")` is 4: an uppercase vowel is not counted.',
  });
  breaking.push({ instance_id: id, model_name_or_path: 'breaks-p2p', model_patch: git(repo, 'diff', bug, commitOf(repo, 'Break #1:')) });
}

writeFileSync(join(here, 'dataset.jsonl'), rows.map((r) => `${JSON.stringify(r)}\n`).join(''));
writeFileSync(join(here, 'breaking-predictions.jsonl'), breaking.map((r) => `${JSON.stringify(r)}\n`).join(''));
rmSync(out, { recursive: true, force: true });
console.log(`wrote ${rows.length} rows and ${breaking.length} breaking predictions`);
