/**
 * Generates the long-history test project "test/longlib" with `git fast-import`: thousands of
 * commits (default 3000; LONG_COMMITS overrides) over about 1200 files, edits of a few lines,
 * files renamed and deleted over time, about 5 MB of packed objects, and 24 "Fix #N:" commits spread across the history
 * (make-dataset.ts turns each into an instance at its parent). Shell project like recipes/test:
 * `sh run_tests.sh [files]` prints pytest -rA style lines, runnable with busybox sh.
 * Deterministic: the same commits every run (fixed seed, dates and identities).
 *
 *   recipes/long/make-repo.sh [OUT]     default OUT: recipes/long/repos/test/longlib
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
// seeded, so every run makes the same repository
import { rng } from '../../test/helpers/rng.js';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, 'repos', 'test', 'longlib');
const COMMITS = Number(process.env.LONG_COMMITS ?? 3000);
const FIXES = 24;
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C', TZ: 'UTC' };

const RUN_TESTS = `#!/bin/sh
# Runs every test_* function of the given test files (default: tests/*.sh).
cd "$(dirname "$0")" || exit 2
files="$*"
[ -n "$files" ] || files=$(ls tests/*.sh)
status=0
for f in $files; do
  for t in $(sed -n 's/^\\(test_[a-z0-9_]*\\)() *{.*/\\1/p' "$f"); do
    if ( . ./lib.sh; . "./$f"; "$t" ) >/dev/null 2>&1; then echo "PASSED $f::$t"; else echo "FAILED $f::$t"; status=1; fi
  done
done
exit $status
`;
const LIB = `# Sources every helper under lib/.
for _lib in lib/*.sh; do . "./$_lib"; done
`;

function main(): void {
  if (existsSync(out)) throw new Error(`make-repo: ${out} exists; remove it first`);
  mkdirSync(out, { recursive: true });
  execFileSync('git', ['init', '-q', '-b', 'main', out], { env: GIT_ENV });
  const rand = rng(15);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const words = Array.from({ length: 3000 }, (_, i) => `w${(i * 7919).toString(36)}`);
  const line = (): string => Array.from({ length: 10 }, () => pick(words)).join(' ');
  const text = (lines: number): string[] => Array.from({ length: lines }, line);
  // Every file's lines: an edit changes a few of them, as real commits do (so history deltas well).
  const content = new Map<string, string[]>();
  const put = (path: string, lines: string[]): void => {
    content.set(path, lines);
    file(path, `${lines.join('\n')}\n`);
  };
  const edit = (path: string): void => {
    const lines = [...content.get(path)!];
    const n = 1 + Math.floor(rand() * 3);
    for (let i = 0; i < n; i++) lines[Math.floor(rand() * lines.length)] = line();
    if (rand() < 0.3) lines.splice(Math.floor(rand() * lines.length), 0, line());
    put(path, lines);
  };
  const chunks: string[] = [];
  const file = (path: string, body: string): void => void chunks.push(`M 100644 inline ${path}\ndata ${Buffer.byteLength(body)}\n${body}`);
  const live: string[] = [];
  let nextFile = 0;
  const fixAt = new Map<number, number>();
  const bugAt = new Map<number, number>();
  for (let k = 1; k <= FIXES; k++) {
    const at = Math.floor(((k - 0.5) * COMMITS) / FIXES);
    fixAt.set(at, k);
    bugAt.set(Math.max(1, at - 1 - Math.floor(COMMITS / FIXES / 2)), k);
  }
  for (let c = 0; c < COMMITS; c++) {
    const k = fixAt.get(c);
    const bug = bugAt.get(c);
    const subject = k !== undefined ? `Fix #${k}: f${k} adds ${k + 1}` : bug !== undefined ? `Add f${bug}` : `Change ${c}`;
    chunks.push(
      `commit refs/heads/main\nmark :${c + 1}\nauthor Test Author <test@example.invalid> ${1_600_000_000 + c * 3600} +0000\ncommitter Test Author <test@example.invalid> ${1_600_000_000 + c * 3600} +0000\ndata ${Buffer.byteLength(subject)}\n${subject}\n`,
    );
    if (c === 0) {
      file('VERSION', '1.0\n');
      file('run_tests.sh', RUN_TESTS);
      file('lib.sh', LIB);
      file('lib/base.sh', 'add() { echo $(($1 + $2)); }\n');
      file('tests/test_base.sh', 'test_add() { [ "$(add 2 3)" = 5 ]; }\n');
      for (let i = 0; i < 1200; i++) {
        const p = `src/m${i % 12}/f${nextFile++}.txt`;
        live.push(p);
        put(p, text(20 + Math.floor(rand() * 40)));
      }
      continue;
    }
    if (bug !== undefined) file(`lib/f${bug}.sh`, `f${bug}() { echo $(($1 + 1)); }\n`);
    if (k !== undefined) {
      // The gold patch (lib/) and the test patch (tests/) of instance k.
      file(`lib/f${k}.sh`, `f${k}() { echo $(($1 + ${k + 1})); }\n`);
      file(`tests/test_f${k}.sh`, `test_f${k}_value() { [ "$(f${k} 2)" = ${k + 3} ]; }\ntest_f${k}_defined() { type f${k} >/dev/null; }\n`);
      continue;
    }
    // Ordinary history: edits, now and then a new file, a rename, a deletion, a larger data file.
    const edits = 1 + Math.floor(rand() * 2);
    for (let e = 0; e < edits; e++) edit(pick(live));
    if (c % 23 === 0) {
      const p = `src/m${Math.floor(rand() * 12)}/f${nextFile++}.txt`;
      live.push(p);
      put(p, text(30));
    }
    if (c % 37 === 0 && live.length > 50) {
      const i = Math.floor(rand() * live.length);
      const to = `src/moved/m${c}/${live[i]!.split('/').at(-1)!}`;
      chunks.push(`R ${live[i]} ${to}\n`);
      content.set(to, content.get(live[i]!)!);
      content.delete(live[i]!);
      live[i] = to;
    }
    if (c % 53 === 0 && live.length > 50) {
      const i = Math.floor(rand() * live.length);
      chunks.push(`D ${live[i]}\n`);
      content.delete(live[i]!);
      live.splice(i, 1);
    }
    if (c % 40 === 0) {
      const bytes = Buffer.alloc(24 << 10);
      for (let b = 0; b < bytes.length; b++) bytes[b] = Math.floor(rand() * 256);
      const body = `${bytes.toString('base64')}\n`;
      file(`data/blob${c % 400}.dat`, body);
    }
  }
  execFileSync('git', ['-C', out, 'fast-import', '--quiet'], { input: chunks.join(''), env: GIT_ENV, maxBuffer: 1 << 30 });
  // fast-import deltas poorly (11 MB here); a mirror is packed like this (5 MB).
  execFileSync('git', ['-C', out, 'repack', '-adfq'], { env: GIT_ENV });
  execFileSync('git', ['-C', out, 'reset', '-q', '--hard', 'main'], { env: GIT_ENV });
}

main();
