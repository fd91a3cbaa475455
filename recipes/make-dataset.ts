/**
 * Regenerates recipes/<set>/dataset.jsonl from that set's generated project: runs its make-repo.sh
 * into a temporary directory, takes each "Fix #N:" commit as the gold solution of instance
 * <prefix>-N (base = its parent; test patch = its change under tests/, gold patch = the rest), and
 * computes FAIL_TO_PASS / PASS_TO_PASS by really running the tests before and after the gold patch.
 *
 *   npx tsx recipes/make-dataset.ts demo     (needs git and python3 with pytest)
 *   npx tsx recipes/make-dataset.ts test     (needs git and sh)
 *   npx tsx recipes/make-dataset.ts long     (needs git and sh; the long-history project)
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const recipes = dirname(fileURLToPath(import.meta.url));

interface DatasetSource {
  repo: string;
  idPrefix: string;
  /** The test command, to which the test files are appended. */
  testCmd: string[];
  versionFile: string;
  versionPattern: RegExp;
  problems: Record<number, string>;
}
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' };

const DEMO_PROBLEMS: Record<number, string> = {
  1: '`pycalc.stats.mean([])` fails with ZeroDivisionError. Like `median`, it should raise a ValueError saying the sequence is empty.',
  2: '`pycalc.text.slugify("Hello   World")` returns "hello---world": runs of whitespace (and hyphens) should become a single hyphen, giving "hello-world".',
  3: '`pycalc.roman.to_roman(4)` returns "IIII" and `to_roman(1994)` "MDCCCCLXXXXIIII". Roman numerals use subtractive notation: 4 is "IV", 1994 is "MCMXCIV".',
  4: '`pycalc.text.is_palindrome("A man, a plan, a canal: Panama")` is False. Palindrome checks should ignore case, spaces and punctuation.',
};

const SOURCES: Record<string, DatasetSource> = {
  demo: {
    repo: 'demo/pycalc',
    idPrefix: 'demo__pycalc',
    testCmd: ['python3', '-m', 'pytest', '-rA', '-p', 'no:cacheprovider'],
    versionFile: 'pycalc/__init__.py',
    versionPattern: /__version__ = "([^"]+)"/,
    problems: DEMO_PROBLEMS,
  },
  test: {
    repo: 'test/shlib',
    idPrefix: 'test__shlib',
    testCmd: ['sh', 'run_tests.sh'],
    versionFile: 'VERSION',
    versionPattern: /^(\S+)/,
    problems: { 1: '`max 3 5` prints 3; it should print the larger argument.', 2: '`abs -4` prints -4; it should print 4.' },
  },
  // A long history (thousands of commits, see long/make-repo.ts) with 24 instances spread over it.
  long: {
    repo: 'test/longlib',
    idPrefix: 'test__longlib',
    testCmd: ['sh', 'run_tests.sh'],
    versionFile: 'VERSION',
    versionPattern: /^(\S+)/,
    problems: Object.fromEntries(Array.from({ length: 24 }, (_, i) => [i + 1, `\`f${i + 1} 2\` prints 3; it should add ${i + 2} to its argument.`])),
  },
};

function git(repo: string, ...args: string[]): string {
  return execFileSync('git', ['-C', repo, ...args], { env: GIT_ENV, encoding: 'utf8', maxBuffer: 1 << 26 });
}

/** pytest -rA short summary: `PASSED tests/x.py::name`, `FAILED tests/x.py::name - msg`. */
function runTests(src: DatasetSource, dir: string, files: string[]): Map<string, string> {
  let out: string;
  try {
    out = execFileSync(src.testCmd[0]!, [...src.testCmd.slice(1), ...files], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', PYTEST_DISABLE_PLUGIN_AUTOLOAD: '1' },
    });
  } catch (e) {
    out = String((e as { stdout?: unknown }).stdout ?? '');
  }
  const status = new Map<string, string>();
  for (const line of out.split('\n')) {
    const m = /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+::\S+)/.exec(line);
    if (m) status.set(m[2]!, m[1]!);
  }
  if (status.size === 0) throw new Error(`no test results parsed from pytest in ${dir}:\n${out}`);
  return status;
}

function checkoutWith(repo: string, commit: string, patches: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'pycalc-eval-'));
  execFileSync('sh', ['-c', `git -C "$1" archive "$2" | tar -x -C "$3"`, 'sh', repo, commit, dir], { env: GIT_ENV });
  for (const p of patches) if (p !== '') execFileSync('git', ['apply', '-'], { cwd: dir, input: p, env: GIT_ENV });
  return dir;
}

function versionAt(src: DatasetSource, repo: string, commit: string): string {
  const m = src.versionPattern.exec(git(repo, 'show', `${commit}:${src.versionFile}`));
  if (!m) throw new Error(`no __version__ at ${commit}`);
  return m[1]!;
}

function main(set: string): void {
  const src = SOURCES[set];
  if (!src) throw new Error(`usage: make-dataset.ts ${Object.keys(SOURCES).join('|')}`);
  const here = join(recipes, set);
  const work = mkdtempSync(join(tmpdir(), `${set}-`));
  const repo = join(work, 'repo');
  try {
    execFileSync(join(here, 'make-repo.sh'), [repo], { stdio: ['ignore', 'ignore', 'inherit'] });
    const log = git(repo, 'log', '--reverse', '--format=%H %P %s')
      .trim()
      .split('\n')
      .map((l) => l.split(' '));
    // A version starts at a commit that touches the version file (or at the root): asking only
    // those keeps this fast on a history of thousands of commits.
    const firstOfVersion = new Map<string, string>();
    const touching = new Set(git(repo, 'log', '--format=%H', '--', src.versionFile).trim().split('\n'));
    for (const [c] of log) {
      if (!touching.has(c!) && firstOfVersion.size > 0) continue;
      const v = versionAt(src, repo, c!);
      if (!firstOfVersion.has(v)) firstOfVersion.set(v, c!);
    }
    const rows: string[] = [];
    for (const [fix, base, ...subject] of log) {
      const m = /^Fix #(\d+):/.exec(subject.join(' '));
      if (!m || fix === undefined || base === undefined) continue;
      const n = Number(m[1]);
      const patch = git(repo, 'diff', base, fix, '--', '.', ':!tests');
      const testPatch = git(repo, 'diff', base, fix, '--', 'tests');
      const testFiles = git(repo, 'diff', '--name-only', base, fix, '--', 'tests').trim().split('\n');
      const beforeDir = checkoutWith(repo, base, [testPatch]);
      const afterDir = checkoutWith(repo, base, [testPatch, patch]);
      const before = runTests(src, beforeDir, testFiles);
      const after = runTests(src, afterDir, testFiles);
      rmSync(beforeDir, { recursive: true, force: true });
      rmSync(afterDir, { recursive: true, force: true });
      const failToPass = [...after].filter(([t, s]) => s === 'PASSED' && before.get(t) !== 'PASSED').map(([t]) => t);
      const passToPass = [...after].filter(([t, s]) => s === 'PASSED' && before.get(t) === 'PASSED').map(([t]) => t);
      const broken = [...after].filter(([, s]) => s !== 'PASSED');
      if (failToPass.length === 0 || broken.length > 0)
        throw new Error(`instance ${n}: gold patch does not fix the tests cleanly: ${JSON.stringify({ failToPass, broken })}`);
      const version = versionAt(src, repo, base);
      rows.push(
        JSON.stringify({
          instance_id: `${src.idPrefix}-${n}`,
          repo: src.repo,
          base_commit: base,
          version,
          environment_setup_commit: firstOfVersion.get(version),
          created_at: git(repo, 'show', '-s', '--format=%aI', fix).trim(),
          problem_statement: src.problems[n] ?? '',
          hints_text: '',
          patch,
          test_patch: testPatch,
          // Classic SWE-bench spelling: JSON strings holding lists.
          FAIL_TO_PASS: JSON.stringify(failToPass),
          PASS_TO_PASS: JSON.stringify(passToPass),
        }),
      );
      process.stderr.write(
        `${src.idPrefix}-${n}: base ${base.slice(0, 12)} version ${version}: ${failToPass.length} fail-to-pass, ${passToPass.length} pass-to-pass\n`,
      );
    }
    writeFileSync(join(here, 'dataset.jsonl'), `${rows.join('\n')}\n`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

main(process.argv[2] ?? 'demo');
