/**
 * Fork and reset against their baselines, in one run over one store (library calls, in-process):
 *  - fork x8 of a sandbox that wrote 100 MB: the shared fork (the parent's upper copied once into a
 *    frozen lower, each child an empty upper over it; forkShared, which forkLeased uses too) against
 *    the streaming fork (a tar of the parent's upper read into each child's upper; forkSandbox, which
 *    the library used before and only this baseline calls now), until all eight run
 *    (aim < 1 s for all eight);
 *  - reset after writing 10 MB and 1 GB (aim: the same time, < 20 ms) against destroy + create of
 *    a new sandbox of the same environment: a sandbox's first reset (a new holder starts), a
 *    later one (the standby holder started after the previous reset is swapped in), and the first
 *    reset of a sandbox opened with prewarmReset (its standby holder started after create).
 * The environment is busybox pushed to a temp registry and pulled before timing. Medians of
 * BENCH_ROUNDS rounds (default 3). Uppers are tmpfs (the default), capped at 2 GiB here.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../src/registry/local.js';
import { forkChildHooks, forkShared, openSandbox, resetLeased } from '../src/runtime/open.js';
import { forkSandbox, type Sandbox } from '../src/sandbox/sandbox.js';
import { StorePaths } from '../src/store/paths.js';
import { pushTree } from '../src/publish/push.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const REF = 'bench/busybox';
const OPEN = { limits: { diskBytes: 2 * 1024 ** 3 } };

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** Writes `mb` MiB into the sandbox's upper, as 1 MiB-block files of 10 MiB (and one remainder). */
async function write(sb: Sandbox, mb: number): Promise<void> {
  const o = await sb.exec(
    [
      '/bin/sh',
      '-c',
      `mkdir -p /work; i=0; left=${mb}; while [ $left -gt 0 ]; do n=$((left < 10 ? left : 10)); ` +
        'dd if=/dev/urandom of=/work/f$i bs=1M count=$n 2>/dev/null; i=$((i+1)); left=$((left-n)); done; sync',
    ],
    { timeoutMs: 600_000 },
  );
  if (o.exitCode !== 0) throw new Error(`write failed: ${o.stderr}`);
}

/** Every sandbox opened, destroyed at the end however the run ends (destroy is idempotent). */
const opened: Sandbox[] = [];
function track(sb: Sandbox): Sandbox {
  opened.push(sb);
  return sb;
}

const work = mkdtempSync(join(tmpdir(), 'ms-bench-fork-reset-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
try {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: REF });
  await (await openSandbox(reg, store, REF)).destroy(); // pulled and laid out before timing

  // fork x8 after writing 100 MB
  const shared: number[] = [];
  const streamed: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const parent = track(await openSandbox(reg, store, REF, OPEN));
    try {
      await write(parent, 100);
      let kids: Sandbox[] = [];
      shared.push(
        await timed(async () => {
          const res = await forkShared(store, parent, 8);
          kids = res.flatMap((x) => (x.ok ? [track(x.sandbox)] : []));
          if (kids.length !== 8) throw new Error(`shared fork: ${res.filter((x) => !x.ok).length} children failed`);
        }),
      );
      await Promise.all(kids.map((k) => k.destroy()));
      streamed.push(
        await timed(async () => {
          kids = (await forkSandbox(parent, 8, forkChildHooks(store, parent))).map(track);
        }),
      );
      await Promise.all(kids.map((k) => k.destroy()));
    } finally {
      await parent.destroy();
    }
  }
  const fs = median(shared);
  const ft = median(streamed);
  console.log(`fork x8 after writing 100 MB: shared ${fs.toFixed(1)} ms, streaming ${ft.toFixed(1)} ms (${(ft / fs).toFixed(1)}x faster; aim < 1000 ms)`);

  // reset after writing 10 MB and 1 GB, against destroy + create. A sandbox's first reset starts
  // a new holder; later ones swap in the standby holder started after the previous reset.
  const first: Record<string, number[]> = { '10 MB': [], '1 GB': [] };
  const prewarmed: Record<string, number[]> = { '10 MB': [], '1 GB': [] };
  const again: Record<string, number[]> = { '10 MB': [], '1 GB': [] };
  const recreate: Record<string, number[]> = { '10 MB': [], '1 GB': [] };
  const sizes = [
    ['10 MB', 10],
    ['1 GB', 1024],
  ] as const;
  for (let r = 0; r < ROUNDS; r++) {
    for (const [label, mb] of sizes) {
      const sb = track(await openSandbox(reg, store, REF, OPEN));
      for (const times of [first[label]!, again[label]!]) {
        await write(sb, mb);
        times.push(await timed(() => resetLeased(store, sb)));
        const check = await sb.exec(['/bin/sh', '-c', 'ls /work 2>/dev/null | wc -l']);
        if (check.stdout.trim() !== '0') throw new Error('reset left files behind');
        // the standby holder starts in the background after a reset: let it, as an episode's work would
        await new Promise((res) => setTimeout(res, 200));
      }
      const pre = track(await openSandbox(reg, store, REF, { ...OPEN, prewarmReset: true }));
      await write(pre, mb); // time enough for the standby holder to start, as an episode's work would be
      prewarmed[label]!.push(await timed(() => resetLeased(store, pre)));
      if ((await pre.exec(['/bin/sh', '-c', 'ls /work 2>/dev/null | wc -l'])).stdout.trim() !== '0') throw new Error('reset left files behind');
      await pre.destroy();
      await write(sb, mb);
      let fresh: Sandbox | undefined;
      recreate[label]!.push(
        await timed(async () => {
          await sb.destroy();
          fresh = track(await openSandbox(reg, store, REF, OPEN));
        }),
      );
      await fresh?.destroy();
    }
  }
  for (const [label] of sizes) {
    const a = median(first[label]!);
    const w = median(again[label]!);
    const b = median(recreate[label]!);
    const p = median(prewarmed[label]!);
    console.log(
      `reset after writing ${label}: first ${a.toFixed(1)} ms, later ${w.toFixed(1)} ms, first with prewarmReset ${p.toFixed(1)} ms; ` +
        `destroy + create ${b.toFixed(1)} ms (${(b / a).toFixed(1)}x, ${(b / w).toFixed(1)}x)`,
    );
  }
  console.log(
    `reset 1 GB / reset 10 MB: first ${(median(first['1 GB']!) / median(first['10 MB']!)).toFixed(2)}x, ` +
      `later ${(median(again['1 GB']!) / median(again['10 MB']!)).toFixed(2)}x (aim: 1x, < 20 ms)`,
  );
} finally {
  await Promise.allSettled(opened.map((sb) => sb.destroy()));
  rmSync(work, { recursive: true, force: true });
}
