/**
 * Build pipeline costs, each beside its baseline in one run:
 *
 *   overhead   the same install commands (the demo's python3 + pytest from apt) run in a plain
 *              chroot of the base, vs through the pipeline (build sandbox, capture, hash, pack,
 *              publish): `build --force` of that env recipe, with its phase timings. Both start
 *              from the base already on local disk (see overhead()). Needs the network to
 *              Debian's mirror, so both sides pay the same downloads; alternating order,
 *              BENCH_REPEATS rounds (default 3). Neither side's tree is warm for long on these
 *              VMs: clean page cache is dropped within seconds (a file written to ext4 was out
 *              of the cache 5 s later), which is why builds keep their upper in RAM (upper.ts).
 *   rebuild    `minisandbox build` of a fully cached 50-instance dataset, the whole command
 *              (process start, plan, 50+ registry lookups, tags), vs the same command's no-op
 *              floor (`minisandbox ls` on the same registry).
 *   storage    the demo dataset's registry bytes (audit) vs one `tar | zstd -3` image per instance
 *              (each instance's merged tree exported and compressed).
 *   history    the long-history dataset (recipes/long: 3000 commits, 24 instances): registry bytes
 *              vs one `tar | zstd -3` image per instance after building 5, 10 and 20 instances
 *              (`--instances`); the registry growth of each added instance (21..24) vs its working
 *              tree's changed files and its own new history; the checkout phase of each instance
 *              vs `git worktree add` of the same commit in the source repository. Hermetic (busybox).
 *
 * Uses the demo dataset: run `npm run demo` first (it builds ./registry); `history` needs nothing.
 *   npx tsx bench/build.ts            (BENCH_ONLY=overhead|rebuild|storage|history runs one part;
 *                                      BENCH_COMPARE_CLI=x/cli.cjs times that bundle's build too)
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

// Measure the bundled CLI, as installed: bin/minisandbox falls back to the sources through tsx
// (seconds of start-up) whenever any source file is newer than the bundle.
execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit' });

const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 50);
const cli = resolve('bin/minisandbox');
const registry = resolve(process.env.BENCH_REGISTRY ?? 'registry');
const work = mkdtempSync(join(tmpdir(), 'ms-bench-build-'));
chmodSync(work, 0o755);
const store = join(work, 'store');
const env = { ...process.env, MINISANDBOX_REGISTRY: registry, MINISANDBOX_STORE: store };

function ms(args: string[], extraEnv: Record<string, string> = {}): string {
  return execFileSync(cli, args, { env: { ...env, ...extraEnv }, encoding: 'utf8', maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'ignore'] });
}
function timed(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mib = (n: number): string => `${(n / 1048576).toFixed(1)} MiB`;

interface BuildJson {
  phases: Record<string, number>;
  nodes: Array<{ kind: string; status: string; phases?: Record<string, number> }>;
}

/**
 * The overhead comparison. Both sides start from the base already on local disk: the chroot side
 * from an exported tree, the pipeline side from a store where the base layer is already laid out
 * (`pull` before the first round), since laying out a parent is a once-per-node cost, not a
 * per-build one. Timed on the chroot side: `unshare`, mounts, chroot and the commands. Timed on
 * the pipeline side: the whole `minisandbox build --force` process (node start, plan, build
 * sandbox, the commands, capture, pack, publish, tag, exit); its own phase timings break it down.
 */
function overhead(): void {
  const baseRef = ms(['--json', 'ls', '--all']).match(/"ref": "(_cache\/base\/[0-9a-f]+)"/)?.[1];
  if (baseRef === undefined) throw new Error('no base in the registry: run `npm run demo` first');
  const commands = ['apt-get update', 'apt-get install -y --no-install-recommends python3 python3-pytest', 'apt-get clean && rm -rf /var/lib/apt/lists/*'];
  const recipe = join(work, 'env.yaml');
  writeFileSync(
    recipe,
    `kind: env\nname: bench-env\nparent: { ref: ${baseRef} }\nenv: { DEBIAN_FRONTEND: ` +
      `noninteractive }\ncommands:\n${commands.map((c) => `  - ${JSON.stringify(c)}`).join('\n')}\n`,
  );
  ms(['pull', baseRef]);
  const chroot: number[] = [];
  const pipeline: number[] = [];
  const phases: Array<Record<string, number>> = [];
  // BENCH_COMPARE_CLI=other/cli.cjs: the same build by another bundle (e.g. an older commit's) each round
  const other = process.env.BENCH_COMPARE_CLI;
  const otherTimes: number[] = [];
  const otherPhases: Array<Record<string, number>> = [];
  for (let r = 0; r < REPEATS; r++) {
    const runChroot = (): void => {
      const root = join(work, `chroot-${r}`);
      ms(['export', baseRef, root]);
      for (const m of ['proc', 'dev']) mkdirSync(join(root, m), { recursive: true });
      writeFileSync(join(root, 'etc/resolv.conf'), readFileSync('/etc/resolv.conf'));
      chroot.push(
        timed(() =>
          execFileSync(
            'unshare',
            [
              '--mount',
              '--fork',
              'sh',
              '-c',
              `mount -t proc proc ${root}/proc && mount --rbind /dev ${root}/dev && chroot ${root} ` +
                `/usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c '${commands.join(' && ')}'`,
            ],
            { stdio: 'ignore' },
          ),
        ),
      );
      rmSync(root, { recursive: true, force: true });
    };
    /** One `build --force` by `run` (this checkout's CLI, or the compared bundle): its wall time and phases. */
    const buildPhases = (run: (args: string[]) => string): { wall: number; phases: Record<string, number> } => {
      let out = '';
      const wall = timed(() => (out = run(['--json', 'build', recipe, '--force'])));
      const j = JSON.parse(out) as BuildJson;
      const node = j.nodes.find((n) => n.kind === 'env' && n.status === 'built');
      if (node?.phases === undefined) throw new Error(`the bench env was not built: ${out.slice(0, 400)}`);
      const { execute = 0, ...cli } = j.phases;
      const nodeTotal = Object.values(node.phases).reduce((a, b) => a + b, 0);
      const inProcess = Object.values(j.phases).reduce((a, b) => a + b, 0);
      return { wall, phases: { ...cli, ...node.phases, 'execute-other': execute - nodeTotal, 'exit+unaccounted': wall - inProcess } };
    };
    const runPipeline = (): void => {
      const b = buildPhases((args) => ms(args));
      pipeline.push(b.wall);
      phases.push(b.phases);
    };
    const runOther = (): void => {
      if (other === undefined) return;
      try {
        const b = buildPhases((args) =>
          execFileSync('node', [other, ...args], { env, encoding: 'utf8', maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'ignore'], timeout: 10 * 60_000 }),
        );
        otherTimes.push(b.wall);
        otherPhases.push(b.phases);
      } catch (e) {
        // the comparison is secondary: one hung or failed round of it must not lose the others
        console.log(`compared CLI failed in round ${r}: ${(e as Error).message.split('\n')[0]}`);
      }
    };
    if (r % 2 === 0) {
      runChroot();
      runOther();
      runPipeline();
    } else {
      runPipeline();
      runOther();
      runChroot();
    }
  }
  const c = median(chroot);
  const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
  // Downloads and dpkg make both sides vary by seconds from run to run on a shared machine, so
  // besides the ratio of medians: the median of each round's own ratio, and the pipeline's time
  // outside its commands (what the pipeline adds) against the chroot run.
  const paired = chroot.map((t, i) => pipeline[i]! / t - 1);
  const outside = phases.map((p, i) => pipeline[i]! - (p.commands ?? 0));
  console.log(`## build overhead (apt install python3 python3-pytest), medians of ${REPEATS}; both sides start from the base already on local disk`);
  console.log(
    `plain chroot ${(c / 1000).toFixed(1)} s   pipeline ${(median(pipeline) / 1000).toFixed(1)} s  ` +
      ` extra ${pct(median(pipeline) / c - 1)}   (median of per-round ratios ${pct(median(paired))})`,
  );
  if (other !== undefined && otherTimes.length > 0) {
    // paired with this checkout's build of the same round (they run back to back)
    const vs = otherTimes.map((t, i) => pipeline[i]! / t - 1);
    console.log(
      `compared: ${other} ${(median(otherTimes) / 1000).toFixed(1)} s, extra ${pct(median(otherTimes) / c - 1)} ` +
        `(${otherTimes.length} rounds); this pipeline vs it, median of per-round ratios ${pct(median(vs))}`,
    );
  }
  console.log(
    `pipeline outside its commands ${(median(outside) / 1000).toFixed(2)} s = ${pct(median(outside) / c)} of the chroot run; its ` +
      `commands ${(median(phases.map((p) => p.commands ?? 0)) / 1000).toFixed(1)} s vs the chroot's ${(c / 1000).toFixed(1)} s`,
  );
  const secs = (xs: number[]): string => xs.map((x) => (x / 1000).toFixed(1)).join(' ');
  console.log(
    `rounds (s): chroot ${secs(chroot)} | pipeline ${secs(pipeline)} | its commands ` +
      `${secs(phases.map((p) => p.commands ?? 0))}${other !== undefined ? ` | compared ${secs(otherTimes)}` : ''}`,
  );
  const compared = otherPhases.length > 0;
  console.log(`pipeline phases (median s, % of the chroot run${compared ? "; then the compared CLI's" : ''}):`);
  const names = [...new Set([...Object.keys(phases[0] ?? {}), ...Object.keys(otherPhases[0] ?? {})])];
  const cell = (ps: Array<Record<string, number>>, name: string): string => {
    const m = median(ps.map((p) => p[name] ?? 0));
    return `${(m / 1000).toFixed(2).padStart(6)}   ${((m / c) * 100).toFixed(1).padStart(5)}%`;
  };
  for (const name of names) console.log(`  ${name.padEnd(20)} ${cell(phases, name)}${compared ? `   | ${cell(otherPhases, name)}` : ''}`);
}

function cachedRebuild(): void {
  const dir = join(work, 'ds');
  mkdirSync(dir);
  execFileSync(resolve('recipes/test/make-repo.sh'), [join(dir, 'repos/test/shlib')], { stdio: 'ignore' });
  const rows = readFileSync(resolve('recipes/test/dataset.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const many = Array.from({ length: INSTANCES }, (_, i) => ({ ...rows[i % rows.length]!, instance_id: `test__shlib-${i + 1}` }));
  writeFileSync(join(dir, 'dataset.jsonl'), `${many.map((r) => JSON.stringify(r)).join('\n')}\n`);
  for (const f of ['specs.yaml', 'base.yaml', 'env.yaml']) writeFileSync(join(dir, f), readFileSync(resolve('recipes/test', f)));
  mkdirSync(join(dir, 'files'));
  writeFileSync(join(dir, 'files/greeting.txt'), readFileSync(resolve('recipes/test/files/greeting.txt')));
  const reg = join(work, 'ds-registry');
  const args = ['build', join(dir, 'dataset.jsonl'), '--specs', join(dir, 'specs.yaml'), '--repos', join(dir, 'repos'), '--jobs', '2'];
  const first = timed(() => ms(args, { MINISANDBOX_REGISTRY: reg }));
  const again: number[] = [];
  const floor: number[] = [];
  for (let r = 0; r < 5; r++) {
    again.push(timed(() => ms(args, { MINISANDBOX_REGISTRY: reg })));
    floor.push(timed(() => ms(['ls'], { MINISANDBOX_REGISTRY: reg })));
  }
  console.log(`\n## rebuild of a fully cached ${INSTANCES}-instance dataset (first build ${(first / 1000).toFixed(1)} s)`);
  console.log(
    `cached rebuild ${(median(again) / 1000).toFixed(2)} s (median of 5)   CLI floor (ls) ` +
      `${(median(floor) / 1000).toFixed(2)} s   ratio ${(median(again) / median(floor)).toFixed(2)}`,
  );
}

function storage(): void {
  const audit = JSON.parse(ms(['--json', 'audit'])) as { refs: { ref: string }[]; totals: { registryBytes: number; logicalBytes: number } };
  let images = 0;
  for (const { ref } of audit.refs) {
    const out = join(work, 'img');
    ms(['export', ref, out]);
    execFileSync('sh', ['-c', `tar -C ${out} -cf - . | zstd -q -3 -T0 -o ${work}/img.tar.zst`]);
    images += statSync(join(work, 'img.tar.zst')).size;
    rmSync(out, { recursive: true, force: true });
    rmSync(join(work, 'img.tar.zst'));
  }
  const reg = audit.totals.registryBytes;
  console.log(`\n## storage, demo dataset (${audit.refs.length} instances)`);
  console.log(
    `registry ${mib(reg)}   one tar|zstd image per instance ${mib(images)}   ratio ` +
      `${(reg / images).toFixed(3)}   (uncompressed images ${mib(audit.totals.logicalBytes)})`,
  );
}

/** `tar | zstd -3` of one instance's merged tree: what a per-instance container image holds. */
function imageBytes(ref: string, extraEnv: Record<string, string>): number {
  const out = join(work, 'img');
  ms(['export', ref, out], extraEnv);
  execFileSync('sh', ['-c', `tar -C ${out} -cf - . | zstd -q -3 -T0 -o ${work}/img.tar.zst`]);
  const n = statSync(join(work, 'img.tar.zst')).size;
  rmSync(out, { recursive: true, force: true });
  rmSync(join(work, 'img.tar.zst'));
  return n;
}

function history(): void {
  const dir = join(work, 'long');
  const repo = join(dir, 'repos/test/longlib');
  mkdirSync(join(dir, 'recipes'), { recursive: true });
  execFileSync('cp', ['-r', resolve('recipes/test'), resolve('recipes/long'), join(dir, 'recipes')]);
  rmSync(join(dir, 'recipes/long/repos'), { recursive: true, force: true });
  execFileSync(resolve('recipes/long/make-repo.sh'), [repo], { stdio: 'ignore' });
  const rows = readFileSync(join(dir, 'recipes/long/dataset.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { instance_id: string; base_commit: string });
  const reg = join(work, 'long-registry');
  const regEnv = { MINISANDBOX_REGISTRY: reg };
  const git = (...args: string[]): string => execFileSync('git', ['-C', repo, ...args], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const regBytes = (): number => Number(execFileSync('du', ['-sb', '--apparent-size', reg], { encoding: 'utf8' }).split('\t')[0]);
  const checkout = new Map<string, number>();
  const build = (n: number): void => {
    const out = ms(
      [
        '--json',
        'build',
        join(dir, 'recipes/long/dataset.jsonl'),
        '--specs',
        join(dir, 'recipes/long/specs.yaml'),
        '--repos',
        join(dir, 'repos'),
        '--jobs',
        '2',
        '--instances',
        rows
          .slice(0, n)
          .map((r) => r.instance_id)
          .join(','),
      ],
      regEnv,
    );
    const j = JSON.parse(out) as BuildJson & { nodes: Array<{ label: string; kind: string; status: string; phases?: Record<string, number> }> };
    for (const node of j.nodes)
      if (node.kind === 'instance' && node.status === 'built' && node.phases?.checkout !== undefined) checkout.set(node.label, node.phases.checkout);
    if (j.nodes.some((node) => node.status === 'failed')) throw new Error(`build failed: ${out.slice(0, 600)}`);
  };
  const images: number[] = [];
  const imagesUpTo = (n: number): number => {
    while (images.length < n) images.push(imageBytes(`long/${rows[images.length]!.instance_id}`, regEnv));
    return images.slice(0, n).reduce((a, b) => a + b, 0);
  };
  console.log(
    `\n## history: the long-history dataset (${git('rev-list', '--count', 'main').trim()} commits, ${rows.length} instances, ` +
      `source pack ${mib(Number(execFileSync('sh', ['-c', `du -sb ${repo}/.git/objects/pack | cut -f1`], { encoding: 'utf8' })))})`,
  );
  console.log('instances   registry      images (tar|zstd -3 each)   ratio');
  for (const n of [5, 10, 20]) {
    build(n);
    const r = regBytes();
    const i = imagesUpTo(n);
    console.log(`${String(n).padStart(9)}   ${mib(r).padStart(10)}   ${mib(i).padStart(10)}                 ${(r / i).toFixed(3)}`);
  }
  // Marginal: each of the next instances alone, against its changed files and its own new history.
  console.log('added instance   registry growth   changed files (raw)   own new history (pack)   growth/changed   growth/(changed+history)');
  const ratios: number[] = [];
  for (let n = 21; n <= rows.length; n++) {
    const before = regBytes();
    build(n);
    const growth = regBytes() - before;
    const prev = rows[n - 2]!.base_commit;
    const commit = rows[n - 1]!.base_commit;
    const changed = git('diff', '--name-only', '--no-renames', '--diff-filter=AM', prev, commit)
      .split('\n')
      .filter((p) => p !== '')
      .reduce((sum, p) => sum + Number(git('cat-file', '-s', `${commit}:${p}`).trim()), 0);
    const own = execFileSync('git', ['-C', repo, 'pack-objects', '--stdout', '--revs'], { input: `${commit}\n^${prev}\n`, maxBuffer: 1 << 28 }).length;
    ratios.push(growth / changed);
    console.log(
      `${rows[n - 1]!.instance_id.padEnd(16)} ${mib(growth).padStart(15)}   ${mib(changed).padStart(19)}   ${mib(own).padStart(22)} ` +
        `  ${(growth / changed).toFixed(2).padStart(14)}   ${(growth / (changed + own)).toFixed(2).padStart(24)}`,
    );
  }
  // Checkout phase vs `git worktree add` of the same commit (which also writes the work tree and index).
  const worktree: number[] = [];
  const ours: number[] = [];
  for (const r of rows) {
    const c = checkout.get(r.instance_id);
    if (c === undefined) continue;
    const wt = join(work, 'wt');
    worktree.push(timed(() => git('worktree', 'add', '-q', '--detach', wt, r.base_commit)));
    git('worktree', 'remove', '--force', wt);
    ours.push(c);
  }
  const perRound = ours.map((o, i) => o / worktree[i]!);
  console.log(
    `checkout phase per instance: median ${(median(ours) / 1000).toFixed(2)} s (max ` +
      `${(Math.max(...ours) / 1000).toFixed(2)} s)   git worktree add ${(median(worktree) / 1000).toFixed(2)} ` +
      `s   ratio ${(median(ours) / median(worktree)).toFixed(2)} (median of per-instance ratios ${median(perRound).toFixed(2)}, ${ours.length} instances)`,
  );
}

try {
  const only = process.env.BENCH_ONLY; // overhead | rebuild | storage | history: run just that part
  if (process.env.BENCH_SKIP_OVERHEAD !== '1' && (only === undefined || only === 'overhead')) overhead();
  if (only === undefined || only === 'rebuild') cachedRebuild();
  if (only === undefined || only === 'storage') storage();
  if (only === undefined || only === 'history') history();
} finally {
  rmSync(work, { recursive: true, force: true });
}
