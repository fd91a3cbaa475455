/**
 * Layer store, end to end, against what a user would otherwise do with tar and zstd:
 *
 *   import:       capture + pack + push into an empty registry   vs  tar -c | zstd -3 -T0 > file
 *   pull:         fetch + verify + lay out into an empty store   vs  zstd -d | tar -x
 *   second pull:  the same environment again (already present)
 *   bytes:        registry holding trees A and B (B shares ~90%) vs  A.tar.zst + B.tar.zst,
 *                 and vs the unique content compressed (A.tar.zst + tar.zst of B's new files)
 *   memory:       peak RSS of an import in its own process
 *
 * Trees are made of real files from this machine (/usr/share, /usr/lib, node_modules: text,
 * docs, ELF binaries) plus a few large files; most files are small. Scale with BENCH_FILES
 * (default 50000), BENCH_LARGE (default 4 files of 64 MiB), BENCH_REPEATS (default 3).
 * A real tree, this checkout's node_modules, is measured too. BENCH_ONLY=pull measures only
 * pull vs zstd -d | tar -x on both trees (skips the import timing, registry bytes and RSS parts).
 *
 * As root with mkfs.ext4 and loop devices, each pull and each tar -x writes into a freshly made
 * ext4 file system of its own (BENCH_FRESH_FS=0 turns this off): on the shared disk, whatever a
 * run deletes slows the next runs' file creation for minutes (ext4 skips recently deleted inode
 * slots, and the scan showed in profiles), which moved tar's own time by 2x from run to run.
 *
 *   npx tsx bench/store.ts
 *   BENCH_ONLY=import npx tsx bench/store.ts   # tree A's import time and peak RSS only
 *   BENCH_ONLY=disk npx tsx bench/store.ts     # store bytes per layer on a node that builds and runs
 *
 * disk (root): the store's layers/ and links/ (hardlinks counted once, allocated bytes) against the
 * laid-out tree, for a node that builds, exports and runs sandboxes. Before: builds and export used
 * layers/<hex>, sandboxes layers/<hex>+<shift> (each file a second pool inode with shifted owners).
 * Now: one layers/<hex>, which a sandbox mounts idmapped (one is opened over it to show it runs).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, copyFileSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { LocalRegistry } from '../src/registry/local.js';
import { realFiles } from './real-files.js';
import { StorePaths } from '../src/store/paths.js';
import { pullEnv } from '../src/store/pull.js';
import { pushTree } from '../src/publish/push.js';
import { layerMapping, openSandbox } from '../src/runtime/open.js';
import { probeHost } from '../src/sandbox/index.js';

const FILES = Number(process.env.BENCH_FILES ?? 50_000);
const LARGE = Number(process.env.BENCH_LARGE ?? 4);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
const ONLY = process.env.BENCH_ONLY;
const ONLY_PULL = ONLY === 'pull';

/** Tree A: FILES real files (each made distinct) in a deep-ish layout, plus LARGE big files. */
function makeTreeA(root: string): number {
  const pool = realFiles(FILES).map((f) => f.path);
  let bytes = 0;
  for (let i = 0; i < FILES; i++) {
    const src = pool[i % pool.length]!;
    const dest = join(root, `d${i % 97}`, `e${i % 13}`, `${i}-${src.split('/').pop()}`);
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(src, dest);
    // a copy of the same source file would dedup: make each one distinct, as real trees are
    if (i >= pool.length) appendFileSync(dest, `\n#${i}\n`);
    bytes += statSync(dest).size;
  }
  for (let k = 0; k < LARGE; k++) {
    const p = join(root, 'large', `blob-${k}.bin`);
    mkdirSync(dirname(p), { recursive: true });
    // half compressible, half random: a model checkpoint or a wheel cache looks like this
    execFileSync('sh', ['-c', `{ head -c 33554432 /dev/urandom; yes "row ${k} of a large data file" | head -c 33554432; } > ${p}`]);
    bytes += statSync(p).size;
  }
  return bytes;
}

/** Tree B: a copy of A with 10% of the files changed and a few added; returns B's new contents' paths. */
function makeTreeB(a: string, b: string): string[] {
  execFileSync('cp', ['-a', a, b]);
  const fresh: string[] = [];
  let i = 0;
  const walk = (d: string, rel: string): void => {
    for (const n of readdirSync(d).sort()) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p, `${rel}${n}/`);
      else if (i++ % 10 === 0) {
        appendFileSync(p, `\nchanged in B ${i}\n`);
        fresh.push(`${rel}${n}`);
      }
    }
  };
  walk(b, '');
  mkdirSync(join(b, 'new'), { recursive: true });
  for (let k = 0; k < 200; k++) {
    writeFileSync(join(b, 'new', `f${k}.txt`), `new file ${k}\n`.repeat(50));
    fresh.push(`new/f${k}.txt`);
  }
  return fresh;
}

function time<T>(fn: () => T): { ms: number; value: T } {
  const t0 = performance.now();
  const value = fn();
  return { ms: performance.now() - t0, value };
}
async function timeAsync<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await fn();
  return { ms: performance.now() - t0, value };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Whether measured outputs go to fresh file systems (see the header). */
const FRESH_FS =
  process.env.BENCH_FRESH_FS !== '0' &&
  process.getuid?.() === 0 &&
  spawnSync('sh', ['-c', 'command -v mkfs.ext4 && command -v losetup && losetup -f'], { stdio: 'ignore' }).status === 0;

/** Makes `dir` the root of a new, empty ext4 file system (a loop-mounted image next to it); returns its removal. */
function freshFs(dir: string, bytes: number): () => void {
  mkdirSync(dir, { recursive: true });
  if (!FRESH_FS) return () => undefined;
  const image = `${dir}.img`;
  // room for the tree twice (store pool and tree share inodes, but staging and slack need space)
  const size = Math.ceil((bytes * 2 + 2 * 1024 ** 3) / 1048576);
  execFileSync('sh', [
    '-c',
    `truncate -s ${size}M ${image} && mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard ${image} && mount -o loop ${image} ${dir}`,
  ]);
  return () => {
    execFileSync('sh', ['-c', `umount ${dir} && rm -f ${image}`]);
  };
}

function dropCaches(): void {
  spawnSync('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches'], { stdio: 'ignore' });
}

const mib = (n: number): string => `${(n / 1048576).toFixed(1)} MiB`;

async function measureTree(label: string, tree: string, bytes: number, work: string): Promise<void> {
  const imp: number[] = [];
  const tarz: number[] = [];
  const pull: number[] = [];
  const untar: number[] = [];
  const again: number[] = [];
  let tarBytes = 0;
  for (let r = 0; r < REPEATS; r++) {
    const dir = join(work, `${label.replace(/[^A-Za-z0-9]+/g, '-')}-${r}`);
    mkdirSync(dir, { recursive: true });
    const reg = new LocalRegistry(join(dir, 'registry'));
    dropCaches();
    tarz.push(time(() => execFileSync('sh', ['-c', `tar -C ${tree} -cf - . | zstd -q -3 -T0 -o ${dir}/tree.tar.zst`])).ms);
    tarBytes = statSync(join(dir, 'tree.tar.zst')).size;
    dropCaches();
    imp.push((await timeAsync(() => pushTree(reg, new StorePaths(join(dir, 'push-store')), tree, { tag: 'bench/t' }))).ms);
    if (ONLY_PULL) await rm(join(dir, 'push-store'), { recursive: true, force: true });
    // alternate which side goes first, so neither always runs on a machine the other just loaded
    const untarOnce = (): void => {
      const unmount = freshFs(join(dir, 'untar'), bytes);
      try {
        dropCaches();
        untar.push(time(() => execFileSync('sh', ['-c', `zstd -q -d -c ${dir}/tree.tar.zst | tar -C ${dir}/untar -xf -`])).ms);
      } finally {
        unmount();
      }
    };
    const pullOnce = async (): Promise<void> => {
      const unmount = freshFs(join(dir, 'store'), bytes);
      try {
        const store = new StorePaths(join(dir, 'store'));
        dropCaches();
        pull.push((await timeAsync(() => pullEnv(reg, store, 'bench/t'))).ms);
        again.push((await timeAsync(() => pullEnv(reg, store, 'bench/t'))).ms);
      } finally {
        unmount();
      }
    };
    if (r % 2 === 0) {
      untarOnce();
      await pullOnce();
    } else {
      await pullOnce();
      untarOnce();
    }
    await rm(dir, { recursive: true, force: true });
  }
  const mbps = (ms: number): string => `${(bytes / 1048576 / (ms / 1000)).toFixed(0)} MiB/s`;
  console.log(`\n## ${label}: ${mib(bytes)} (tar.zst ${mib(tarBytes)}), medians of ${REPEATS}`);
  if (!ONLY_PULL)
    console.log(
      `import  ${median(imp).toFixed(0)} ms (${mbps(median(imp))})  vs tar|zstd -3 -T0 ${median(tarz).toFixed(0)} ` +
        `ms (${mbps(median(tarz))})  throughput ratio ${(median(tarz) / median(imp)).toFixed(2)}`,
    );
  console.log(
    `pull    ${median(pull).toFixed(0)} ms  vs zstd -d|tar -x ${median(untar).toFixed(0)} ms  speed ` +
      `ratio ${(median(untar) / median(pull)).toFixed(2)}${FRESH_FS ? '  (each onto a fresh ext4)' : ''}`,
  );
  console.log(
    `each run: pull ${pull.map((x) => x.toFixed(0)).join(' ')} ms, tar -x ${untar.map((x) => x.toFixed(0)).join(' ')} ` +
      `ms; per-run ratios ${pull.map((p, i) => (untar[i]! / p).toFixed(2)).join(' ')}`,
  );
  console.log(`second pull of a present environment: ${median(again).toFixed(1)} ms`);
}

/** Peak RSS of an import, in a process of its own. */
async function peakImportRss(tree: string, bytes: number, work: string): Promise<void> {
  const rssScript = join(work, 'rss.mts');
  writeFileSync(
    rssScript,
    `import { LocalRegistry } from '${resolve('src/registry/local.ts')}';\nimport { StorePaths } from ` +
      `'${resolve('src/store/paths.ts')}';\nimport { pushTree } from '${resolve('src/publish/push.ts')}';\nawait ` +
      `pushTree(new LocalRegistry(process.argv[2]!), new StorePaths(process.argv[3]!), ` +
      `process.argv[4]!, { tag: 'rss/x' });\nconsole.log(process.resourceUsage().maxRSS);\n`,
  );
  const rss = Number(
    execFileSync('npx', ['tsx', rssScript, join(work, 'rss-reg'), join(work, 'rss-store'), tree], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .pop(),
  );
  console.log(`\n## peak RSS importing tree A (${mib(bytes)}, ${FILES} files): ${(rss / 1024).toFixed(0)} MiB`);
}

/** BENCH_ONLY=import: tree A's import against tar | zstd, and its peak RSS. */
async function measureImport(tree: string, bytes: number, work: string): Promise<void> {
  const imp: number[] = [];
  const tarz: number[] = [];
  for (let r = 0; r < REPEATS; r++) {
    const dir = join(work, `import-${r}`);
    mkdirSync(dir, { recursive: true });
    dropCaches();
    tarz.push(time(() => execFileSync('sh', ['-c', `tar -C ${tree} -cf - . | zstd -q -3 -T0 -o ${dir}/tree.tar.zst`])).ms);
    dropCaches();
    imp.push((await timeAsync(() => pushTree(new LocalRegistry(join(dir, 'registry')), new StorePaths(join(dir, 'push-store')), tree, { tag: 'bench/t' }))).ms);
    await rm(dir, { recursive: true, force: true });
  }
  const mbps = (ms: number): string => `${(bytes / 1048576 / (ms / 1000)).toFixed(0)} MiB/s`;
  console.log(`\n## tree A (generated): ${mib(bytes)}, medians of ${REPEATS}`);
  console.log(
    `import  ${median(imp).toFixed(0)} ms (${mbps(median(imp))})  vs tar|zstd -3 -T0 ${median(tarz).toFixed(0)} ` +
      `ms (${mbps(median(tarz))})  throughput ratio ${(median(tarz) / median(imp)).toFixed(2)}`,
  );
  console.log(`each run: import ${imp.map((x) => x.toFixed(0)).join(' ')} ms, tar|zstd ${tarz.map((x) => x.toFixed(0)).join(' ')} ms`);
  await peakImportRss(tree, bytes, work);
}

/** Allocated bytes under `paths`, each inode counted once across all of them. */
function duBytes(paths: string[]): number {
  const out = execFileSync('du', ['-scB1', ...paths], { encoding: 'utf8' })
    .trim()
    .split('\n');
  return Number(out[out.length - 1]!.split('\t')[0]);
}

/** BENCH_ONLY=disk: see the header. */
async function measureDisk(tree: string, work: string): Promise<void> {
  const host = await probeHost();
  const reg = new LocalRegistry(join(work, 'disk-reg'));
  await pushTree(reg, new StorePaths(join(work, 'disk-push')), tree, { tag: 'bench/disk' });
  const laid = duBytes([tree]);
  const before = new StorePaths(join(work, 'disk-before'));
  await pullEnv(reg, before, 'bench/disk', { idShift: 0 }); // build parent / export
  await pullEnv(reg, before, 'bench/disk', { idShift: host.idMap.uidStart }); // sandboxes
  const after = new StorePaths(join(work, 'disk-after'));
  await pullEnv(reg, after, 'bench/disk', { idShift: 0 }); // build parent / export
  const mapping = await layerMapping(after, host);
  const sb = await openSandbox(reg, after, 'bench/disk'); // sandboxes: the same tree, idmapped
  await sb.destroy();
  const b = duBytes([before.layersDir, before.linksDir]);
  const a = duBytes([after.layersDir, after.linksDir]);
  console.log(`\n## store bytes per layer, a node that builds and runs (${FILES} files + ${LARGE} large; laid-out tree ${mib(laid)})`);
  console.log(`before (layers/<hex> + layers/<hex>+<shift>): ${mib(b)}  ${(b / laid).toFixed(2)}x the tree`);
  console.log(
    `now (${mapping.kind === 'idmap' ? 'one layers/<hex>, sandboxes mount it idmapped' : 'no idmapped mounts here: shifted fallback'}): ` +
      `${mib(a)}  ${(a / laid).toFixed(2)}x the tree`,
  );
}

async function main(): Promise<void> {
  const work = await mkdtemp(join(process.env.BENCH_DIR ?? tmpdir(), 'ms-bench-store-'));
  // sandboxes (BENCH_ONLY=disk) reach their state dirs under it with their own ids
  execFileSync('chmod', ['0711', work]);
  try {
    const a = join(work, 'A');
    const b = join(work, 'B');
    console.log(`generating trees: ${FILES} files + ${LARGE} large ...`);
    const bytesA = makeTreeA(a);
    if (ONLY === 'disk') {
      await measureDisk(a, work);
      return;
    }
    if (ONLY === 'import') {
      await measureImport(a, bytesA, work);
      return;
    }
    await measureTree('tree A (generated)', a, bytesA, work);
    if (ONLY_PULL) {
      await rm(a, { recursive: true, force: true });
      await measureTree(
        'real tree: node_modules',
        resolve('node_modules'),
        Number(execFileSync('du', ['-sb', `${resolve('node_modules')}/`], { encoding: 'utf8' }).split('\t')[0]),
        work,
      );
      return;
    }

    const fresh = makeTreeB(a, b);
    // bytes: A and B in one registry vs one tar.zst each
    const reg = new LocalRegistry(join(work, 'both'));
    const store = new StorePaths(join(work, 'both-store'));
    await pushTree(reg, store, a, { tag: 'bench/a' });
    await pushTree(reg, store, b, { tag: 'bench/b' });
    let regBytes = 0;
    for await (const x of reg.listBlobs()) regBytes += x.size;
    execFileSync('sh', ['-c', `tar -C ${a} -cf - . | zstd -q -3 -T0 -o ${work}/a.tzst; tar -C ${b} -cf - . | zstd -q -3 -T0 -o ${work}/b.tzst`]);
    // B's contents that A lacks, compressed alone: what any dedup could at best add for B
    writeFileSync(join(work, 'fresh.list'), `${fresh.join('\n')}\n`);
    execFileSync('sh', ['-c', `tar -C ${b} -T ${work}/fresh.list -cf - | zstd -q -3 -T0 -o ${work}/bnew.tzst`]);
    const aZ = statSync(`${work}/a.tzst`).size;
    const bZ = statSync(`${work}/b.tzst`).size;
    const uniqueZ = aZ + statSync(`${work}/bnew.tzst`).size;
    console.log(`\n## registry bytes, trees A + B (B shares ~90% of A)`);
    console.log(`registry ${mib(regBytes)}  vs  A.tar.zst + B.tar.zst ${mib(aZ + bZ)}  ratio ${(regBytes / (aZ + bZ)).toFixed(3)}`);
    console.log(`registry vs unique content compressed (${mib(uniqueZ)}): ${((regBytes / uniqueZ - 1) * 100).toFixed(1)}% over`);

    await peakImportRss(a, bytesA, work);

    await rm(a, { recursive: true, force: true });
    await rm(b, { recursive: true, force: true });
    const nm = resolve('node_modules');
    const nmBytes = Number(execFileSync('du', ['-sb', `${nm}/`], { encoding: 'utf8' }).split('\t')[0]);
    await measureTree('real tree: node_modules', nm, nmBytes, work);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

await main();
