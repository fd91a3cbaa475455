/**
 * Instance checkouts of one repository: the bytes their `.git` directories put in a registry, with
 * every checkout carrying its full history (per-instance image baseline) vs checkouts borrowing a
 * shared history store (a history layer of its own, stored once, that the instance layers stack
 * on) and history segment packs (each stored once however many layers hold it), plus the time
 * per checkout of each (segment packs made once in a host cache, as builds do).
 * Synthetic repository made with git fast-import.
 *
 *   npx tsx bench/checkout-history.ts
 *   BENCH_COMMITS=20000 BENCH_FILES=3000 BENCH_INSTANCES=50 npx tsx bench/checkout-history.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { computeRepoHistories, historyPath } from '../src/builder/plan-history.js';
import { DatasetRowSchema } from '../src/dataset/row.js';
import { checkoutInstance, makeHistoryLayer } from '../src/recipe/checkout.js';
import type { HistoryRecipe, InstanceRecipe } from '../src/recipe/schema.js';
import { rng } from '../test/helpers/rng.js';

const COMMITS = Number(process.env.BENCH_COMMITS ?? 3000);
const FILES = Number(process.env.BENCH_FILES ?? 400);
const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 8);
const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };

function makeRepo(dir: string): string[] {
  execFileSync('git', ['init', '-q', '-b', 'main', dir], { env: GIT_ENV });
  const rand = rng(42);
  const words = Array.from({ length: 2000 }, (_, i) => `w${i.toString(36)}`);
  const line = (): string => Array.from({ length: 8 }, () => words[Math.floor(rand() * words.length)]).join(' ');
  const chunks: string[] = [];
  for (let c = 0; c < COMMITS; c++) {
    chunks.push(`commit refs/heads/main\nmark :${c + 1}\ncommitter Bench <b@example.invalid> ${1_700_000_000 + c * 60} +0000\ndata 9\ncommit ${c % 10}\n`);
    const touched = c === 0 ? FILES : 1 + Math.floor(rand() * 4);
    for (let t = 0; t < touched; t++) {
      const f = c === 0 ? t : Math.floor(rand() * FILES);
      const body = `${Array.from({ length: 40 }, line).join('\n')}\n`;
      chunks.push(`M 100644 inline src/m${Math.floor(f / 50)}/f${f}.py\ndata ${Buffer.byteLength(body)}\n${body}`);
    }
  }
  execFileSync('git', ['-C', dir, 'fast-import', '--quiet'], { input: chunks.join(''), env: GIT_ENV, maxBuffer: 1 << 30 });
  execFileSync('git', ['-C', dir, 'gc', '-q', '--aggressive'], { env: GIT_ENV });
  return execFileSync('git', ['-C', dir, 'rev-list', '--reverse', 'main'], { encoding: 'utf8', env: GIT_ENV }).trim().split('\n');
}

const du = (path: string): number => Number(execFileSync('du', ['-sb', path], { encoding: 'utf8' }).split('\t')[0]);

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'ms-bench-history-'));
  try {
    const repo = join(work, 'repos', 'bench', 'big');
    const commits = makeRepo(repo);
    // Instances spread over the newer half of history, as dataset tasks cluster in a repo's later years.
    const picks = Array.from({ length: INSTANCES }, (_, i) => commits[Math.floor(commits.length / 2 + ((i + 1) * (commits.length / 2 - 1)) / INSTANCES)]!);
    const rows = picks.map((c, i) => ({
      where: `x:${i + 1}`,
      row: DatasetRowSchema.parse({ instance_id: `bench__big-${i}`, repo: 'bench/big', version: '1', base_commit: c }),
    }));
    const t0 = performance.now();
    const histories = await computeRepoHistories(rows, () => ({ path: repo }));
    const bases = new Map([...histories].map(([k, h]) => [k, h.base]));
    const mergeBaseMs = performance.now() - t0;
    const recipe = (commit: string, shared: boolean): InstanceRecipe => ({
      kind: 'instance',
      parent: { recipe: 'x' },
      repo: { path: repo },
      commit,
      workdir: '/testbed',
      commands: [],
      env: {},
      shell: '/bin/sh',
      ...(shared
        ? { history: { base: bases.get('bench/big')!, path: historyPath('bench/big'), segments: histories.get('bench/big')!.segments.get(commit)! } }
        : {}),
    });
    const result = { plain: { bytes: 0, ms: [] as number[] }, shared: { bytes: 0, ms: [] as number[], store: 0 } };
    // The history layer, made once (its own plan node in a build).
    const historyRoot = join(work, 'history-layer');
    const hr: HistoryRecipe = { kind: 'history', parent: { recipe: 'x' }, repo: { path: repo }, base: bases.get('bench/big')!, path: historyPath('bench/big') };
    await makeHistoryLayer(hr, historyRoot);
    result.shared.store = du(join(historyRoot, 'opt'));
    const historyObjects = join(historyRoot, hr.path, 'objects');
    const seen = new Set<string>();
    for (const [i, c] of picks.entries()) {
      for (const shared of [false, true]) {
        const root = join(work, `${shared ? 's' : 'p'}${i}`);
        const t = performance.now();
        await checkoutInstance(recipe(c, shared), root, shared ? { historyObjects, historyCache: join(work, 'history-cache') } : {});
        const ms = performance.now() - t;
        const own = du(join(root, 'testbed', '.git'));
        if (shared) {
          result.shared.ms.push(ms);
          // segment packs are the same files in every layer that holds them: count each once
          const packs = execFileSync(
            'sh',
            ['-c', 'cd "$1/testbed/.git/objects/pack" && for f in *.pack *.idx; do [ -e "$f" ] && echo "$f $(stat -c %s "$f")"; done; true', 'sh', root],
            { encoding: 'utf8' },
          )
            .trim()
            .split('\n')
            .filter((l) => l !== '');
          let dup = 0;
          for (const l of packs) {
            const [name, size] = l.split(' ') as [string, string];
            if (seen.has(name)) dup += Number(size);
            seen.add(name);
          }
          result.shared.bytes += own - dup;
        } else {
          result.plain.ms.push(ms);
          result.plain.bytes += own;
        }
        rmSync(root, { recursive: true, force: true });
      }
    }
    const med = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
    const p99 = (a: number[]): number => [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.ceil(a.length * 0.99) - 1)]!;
    const sharedTotal = result.shared.bytes + result.shared.store;
    console.log(
      `repository: ${COMMITS} commits, ${FILES} files, .git ${(du(join(repo, '.git')) / 1e6).toFixed(1)} ` +
        `MB; ${INSTANCES} instances; merge base in ${mergeBaseMs.toFixed(0)} ms`,
    );
    console.log(`.git bytes over all instance layers (content-addressed):`);
    console.log(`  full history per instance  ${(result.plain.bytes / 1e6).toFixed(2)} MB`);
    console.log(
      `  shared history             ${(sharedTotal / 1e6).toFixed(2)} MB  (store ` +
        `${(result.shared.store / 1e6).toFixed(2)} MB once + ${(result.shared.bytes / 1e6).toFixed(2)} MB own)`,
    );
    console.log(`  ratio shared / full        ${(sharedTotal / result.plain.bytes).toFixed(3)}`);
    console.log(
      `checkout time per instance:  full median ${med(result.plain.ms).toFixed(0)} ms p99 ${p99(result.plain.ms).toFixed(0)} ms   shared median ` +
        `${med(result.shared.ms).toFixed(0)} ms p99 ${p99(result.shared.ms).toFixed(0)} ` +
        `ms   ratio ${(med(result.shared.ms) / med(result.plain.ms)).toFixed(2)}`,
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
