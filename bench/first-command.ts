/**
 * A new sandbox's first command on an environment already in the store (issue #27's aim: under
 * 1 s on a real-sized task), library calls in one process, sides alternating each round:
 *   - with the git stat cache (runtime/git-stat-cache.ts, what `serve` uses): create, then the
 *     first command, then a second one;
 *   - baseline: the same without it (before: git re-hashed the whole work tree on its first
 *     `git status`);
 *   - floor: the same `git status` on the host, in a checkout of the same repository.
 * The environment is the shared Debian fixture (bookworm minbase with git, 340 MB) plus an
 * instance layer: a repository of BENCH_FILES real files of this machine (default 6800, at most
 * 64 KiB each: about the size of Django's work tree), committed. Both are pushed once to a
 * registry under BENCH_DIR (default /var/tmp/minisandbox-bench-first-command) and pulled before
 * timing; the page cache is warm for every side (the files were just laid out, or read).
 * BENCH_ROUNDS rounds (default 7), medians and the slowest. BENCH_COMMAND overrides the command
 * (default `git status --short`).
 *
 *   npx tsx bench/first-command.ts
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, chmodSync, copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { LocalRegistry } from '../src/registry/local.js';
import { resolveEnv } from '../src/registry/resolve-env.js';
import { GitStatCache } from '../src/runtime/git-stat-cache.js';
import { hostIdShift, openSandbox } from '../src/runtime/open.js';
import { probeHost } from '../src/sandbox/index.js';
import { ensureDebianRootfs } from '../src/sandbox/rootfs.js';
import { StorePaths } from '../src/store/paths.js';
import { pullEnv } from '../src/store/pull.js';
import { pushTree } from '../src/publish/push.js';
import { SHARED_FIXTURES_DIR } from '../test/helpers/sandbox-testkit.js';
import { realFiles } from './real-files.js';

const FILES = Number(process.env.BENCH_FILES ?? 6800);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const COMMAND = process.env.BENCH_COMMAND ?? 'git status --short';
const DIR = process.env.BENCH_DIR ?? '/var/tmp/minisandbox-bench-first-command';
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const max = (xs: number[]): number => Math.max(...xs);

/** The instance tree: /testbed, a repository of FILES real files, committed. */
function makeInstance(root: string): void {
  const tb = join(root, 'testbed');
  const pool = realFiles(FILES, 64 << 10).map((f) => f.path);
  for (let i = 0; i < FILES; i++) {
    const src = pool[i % pool.length]!;
    const dest = join(tb, `pkg${i % 40}`, `mod${i % 9}`, `${i}-${src.split('/').pop()}`);
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(src, dest);
    if (i >= pool.length) appendFileSync(dest, `\n#${i}\n`);
  }
  execFileSync('git', ['init', '-q', tb], { env: GIT_ENV });
  execFileSync('git', ['-C', tb, 'add', '-A'], { env: GIT_ENV });
  execFileSync('git', ['-C', tb, '-c', 'user.name=b', '-c', 'user.email=b@e', 'commit', '-qm', 'base'], { env: GIT_ENV });
}

async function main(): Promise<void> {
  mkdirSync(DIR, { recursive: true, mode: 0o755 });
  chmodSync(DIR, 0o755); // the sandboxes' ids reach the store below it
  const reg = new LocalRegistry(join(DIR, 'registry'));
  const push = new StorePaths(join(DIR, 'push'));
  const ref = `bench/instance-${FILES}`;
  if ((await reg.getRef('bench/debian')) === null) {
    console.log('pushing the Debian fixture (once) ...');
    await pushTree(reg, push, await ensureDebianRootfs(SHARED_FIXTURES_DIR), { tag: 'bench/debian' });
  }
  const instance = join(DIR, `instance-${FILES}`);
  if ((await reg.getRef(ref)) === null) {
    console.log(`making and pushing a repository of ${FILES} files (once) ...`);
    if (!existsSync(instance)) makeInstance(instance);
    await pushTree(reg, push, instance, { parent: await resolveEnv(reg, 'bench/debian'), tag: ref, config: { workdir: '/testbed' } });
  }
  const store = new StorePaths(join(DIR, 'store'));
  await pullEnv(reg, store, ref, { idShift: await hostIdShift(store) });
  const host = await probeHost();
  const cache = new GitStatCache();
  const sides = {
    cache: { create: [] as number[], first: [] as number[], second: [] as number[] },
    none: { create: [] as number[], first: [] as number[], second: [] as number[] },
  };
  const argv = ['/bin/sh', '-c', COMMAND];
  // untimed: each side's first open reads what it reads once per process (the stat cache its manifests)
  for (const withCache of [true, false]) await (await openSandbox(reg, store, ref, { host, ...(withCache ? { gitStatCache: cache } : {}) })).destroy();
  for (let r = 0; r < ROUNDS; r++) {
    for (const side of r % 2 === 0 ? (['cache', 'none'] as const) : (['none', 'cache'] as const)) {
      const t0 = performance.now();
      const sb = await openSandbox(reg, store, ref, { host, ...(side === 'cache' ? { gitStatCache: cache } : {}) });
      const t1 = performance.now();
      try {
        const o = await sb.exec(argv);
        const t2 = performance.now();
        if (o.exitCode !== 0) throw new Error(`${COMMAND} failed: ${o.stderr}`);
        await sb.exec(argv);
        sides[side].create.push(t1 - t0);
        sides[side].first.push(t2 - t0);
        sides[side].second.push(performance.now() - t2);
      } finally {
        await sb.destroy();
      }
    }
  }
  const floor: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t = performance.now();
    execFileSync('/bin/sh', ['-c', COMMAND], { cwd: join(instance, 'testbed'), env: GIT_ENV });
    floor.push(performance.now() - t);
  }
  const f = (ms: number): string => `${ms.toFixed(0)} ms`;
  console.log(`\n## first command (\`${COMMAND}\`) of a new sandbox, env in the store: ${FILES} files; medians (slowest) of ${ROUNDS}`);
  for (const [label, s] of [
    ['with the git stat cache', sides.cache],
    ['without (baseline)     ', sides.none],
  ] as const)
    console.log(
      `${label}: create ${f(median(s.create))}, create + first command ${f(median(s.first))} (${f(max(s.first))}), a second command ${f(median(s.second))}`,
    );
  console.log(`the command on the host, in a checkout: ${f(median(floor))}`);
  console.log(
    `create + first command: ${(median(sides.none.first) / median(sides.cache.first)).toFixed(1)}x faster with the stat cache; ` +
      `${median(sides.cache.first) < 1000 ? 'under' : 'over'} the 1 s aim`,
  );
}

await main();
