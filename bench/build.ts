/**
 * Build pipeline costs, each beside its baseline in one run:
 *
 *   overhead   the same install commands (the demo's python3 + pytest from apt) run in a plain
 *              chroot of the base, vs through the pipeline (build sandbox, capture, hash, pack,
 *              publish): `build --force` of that env recipe. Needs the network to Debian's mirror,
 *              so both sides pay the same downloads; alternating order, BENCH_REPEATS rounds.
 *   rebuild    `minisandbox build` of a fully cached 50-instance dataset, the whole command
 *              (process start, plan, 50+ registry lookups, tags), vs the same command's no-op
 *              floor (`minisandbox ls` on the same registry).
 *   storage    the demo dataset's registry bytes (audit) vs one `tar | zstd -3` image per instance
 *              (each instance's merged tree exported and compressed).
 *
 * Uses the demo dataset: run `npm run demo` first (it builds ./registry).
 *   npx tsx bench/build.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const REPEATS = Number(process.env.BENCH_REPEATS ?? 2);
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

function overhead(): void {
  const baseRef = ms(['--json', 'ls', '--all']).match(/"ref": "(_cache\/base\/[0-9a-f]+)"/)?.[1];
  if (baseRef === undefined) throw new Error('no base in the registry: run `npm run demo` first');
  const commands = ['apt-get update', 'apt-get install -y --no-install-recommends python3 python3-pytest', 'apt-get clean && rm -rf /var/lib/apt/lists/*'];
  const recipe = join(work, 'env.yaml');
  writeFileSync(recipe, `kind: env\nname: bench-env\nparent: { ref: ${baseRef} }\nenv: { DEBIAN_FRONTEND: noninteractive }\ncommands:\n${commands.map((c) => `  - ${JSON.stringify(c)}`).join('\n')}\n`);
  const chroot: number[] = [];
  const pipeline: number[] = [];
  for (let r = 0; r < REPEATS; r++) {
    const runChroot = (): void => {
      const root = join(work, `chroot-${r}`);
      ms(['export', baseRef, root]);
      for (const m of ['proc', 'dev']) mkdirSync(join(root, m), { recursive: true });
      writeFileSync(join(root, 'etc/resolv.conf'), readFileSync('/etc/resolv.conf'));
      chroot.push(
        timed(() =>
          execFileSync('unshare', ['--mount', '--fork', 'sh', '-c', `mount -t proc proc ${root}/proc && mount --rbind /dev ${root}/dev && chroot ${root} /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c '${commands.join(' && ')}'`], { stdio: 'ignore' }),
        ),
      );
      rmSync(root, { recursive: true, force: true });
    };
    const runPipeline = (): void => {
      pipeline.push(timed(() => ms(['build', recipe, '--force'])));
    };
    if (r % 2 === 0) {
      runChroot();
      runPipeline();
    } else {
      runPipeline();
      runChroot();
    }
  }
  console.log(`## build overhead (apt install python3 python3-pytest), medians of ${REPEATS}`);
  console.log(`plain chroot ${(median(chroot) / 1000).toFixed(1)} s   pipeline ${(median(pipeline) / 1000).toFixed(1)} s   extra ${((median(pipeline) / median(chroot) - 1) * 100).toFixed(1)}%`);
}

function cachedRebuild(): void {
  const dir = join(work, 'ds');
  mkdirSync(dir);
  execFileSync(resolve('recipes/test/make-repo.sh'), [join(dir, 'repos/test/shlib')], { stdio: 'ignore' });
  const rows = readFileSync(resolve('recipes/test/dataset.jsonl'), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>);
  const many = Array.from({ length: INSTANCES }, (_, i) => ({ ...rows[i % rows.length]!, instance_id: `test__shlib-${i + 1}` }));
  writeFileSync(join(dir, 'dataset.jsonl'), many.map((r) => JSON.stringify(r)).join('\n') + '\n');
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
  console.log(`cached rebuild ${(median(again) / 1000).toFixed(2)} s (median of 5)   CLI floor (ls) ${(median(floor) / 1000).toFixed(2)} s   ratio ${(median(again) / median(floor)).toFixed(2)}`);
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
  console.log(`registry ${mib(reg)}   one tar|zstd image per instance ${mib(images)}   ratio ${(reg / images).toFixed(3)}   (uncompressed images ${mib(audit.totals.logicalBytes)})`);
}

try {
  if (process.env.BENCH_SKIP_OVERHEAD !== '1') overhead();
  cachedRebuild();
  storage();
} finally {
  rmSync(work, { recursive: true, force: true });
}
