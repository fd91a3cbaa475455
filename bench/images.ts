/**
 * Importing container images, against what a user would otherwise do, in one run:
 *
 *   time:   `minisandbox import docker://...` of N images sharing a base, one after another,
 *           into an empty registry   vs   `skopeo copy docker://... oci:DIR` + `umoci unpack`
 *           of the same images from the same local registry (Debian's docker-registry);
 *   bytes:  the minisandbox registry after all N   vs   the images' compressed layers as the
 *           image registry stores them (distinct layers once), and vs one compressed image per task;
 *   second: what the second image fetched against its whole compressed size (only its own layer).
 *
 * Images (built by buildah from local files, no network): a base of busybox plus this machine's
 * Python standard library (~50 MiB, many small files); per image one layer holding a "repository"
 * (TypeScript's lib directory, ~23 MiB, identical across images but for one file), the shape of
 * SWE-bench instance images: per-instance layers that differ in a few files, so identical layers
 * are rare and identical files common. Scale with BENCH_IMAGES (default 6).
 *
 *   npx tsx bench/images.ts
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeWorkDir, startRegistry } from '../test/helpers/images.js';
import { importImage } from '../src/image/import.js';
import { LocalRegistry } from '../src/registry/local.js';
import { StorePaths } from '../src/store/paths.js';

const N = Number(process.env.BENCH_IMAGES ?? 6);
const PY = ['/usr/lib/python3.11', '/usr/lib/python3'].find((p) => {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
});
const REPO = ['node_modules/typescript/lib', '/work/main/node_modules/typescript/lib'].find((p) => {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
});

function run(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

function duBytes(dir: string): number {
  let n = 0;
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) n += statSync(p).size;
    }
  };
  walk(dir);
  return n;
}

const fmt = (n: number): string => `${(n / (1 << 20)).toFixed(1)} MiB`;

async function main(): Promise<void> {
  if (PY === undefined || REPO === undefined) throw new Error('needs /usr/lib/python3* and node_modules/typescript/lib');
  const work = mkdtempSync(join(tmpdir(), 'ms-bench-images-'));
  const registry = await startRegistry(join(work, 'docker-registry'));
  try {
    const storage = ['--root', join(work, 'storage'), '--runroot', join(work, 'run'), '--storage-driver', 'overlay'];
    const b = (...a: string[]): string => run('buildah', [...storage, ...a]);
    // base
    const root = join(work, 'rootfs');
    cpSync('/bin/busybox', join(root, 'bin/busybox'), { recursive: true });
    cpSync(PY, join(root, PY.slice(1)), { recursive: true, verbatimSymlinks: true });
    run('tar', ['-C', root, '--numeric-owner', '-cf', join(work, 'base.tar'), '.']);
    const c0 = b('from', 'scratch');
    b('add', c0, join(work, 'base.tar'), '/');
    b('commit', '--quiet', c0, 'localhost/bench/base:1');
    const cs = (n: string): string => `containers-storage:[overlay@${join(work, 'storage')}+${join(work, 'run')}]${n}`;
    const names: string[] = [];
    for (let i = 0; i < N; i++) {
      const c = b('from', '--pull-never', 'localhost/bench/base:1');
      const m = b('mount', c);
      cpSync(REPO, join(m, 'testbed'), { recursive: true });
      writeFileSync(join(m, 'testbed', 'INSTANCE'), `instance ${i}\n`);
      b('umount', c);
      b('commit', '--quiet', c, `localhost/bench/task:${i}`);
      run('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', cs(`localhost/bench/task:${i}`), `docker://${registry.host}/bench/task:${i}`]);
      names.push(`docker://${registry.host}/bench/task:${i}`);
    }
    // the image registry's own bytes: distinct layers and configs/manifests, as stored
    const imageRegistryBytes = duBytes(join(work, 'docker-registry', 'data', 'docker', 'registry', 'v2', 'blobs'));

    // minisandbox
    const reg = new LocalRegistry(join(work, 'ms-registry'));
    const store = new StorePaths(join(work, 'ms-store'));
    const t0 = performance.now();
    const results = [];
    for (const n of names) results.push(await importImage(reg, store, n, { tlsVerify: false }));
    const msSeconds = (performance.now() - t0) / 1000;
    // the process's peak resident memory so far: the imports (the images were built by other processes)
    const peakRssMiB = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) / 1024;
    const msBytes = duBytes(join(work, 'ms-registry', 'blobs'));
    const perTaskCompressed = results.reduce((s, r) => s + r.layers.reduce((a, l) => a + l.compressedSize, 0), 0);
    const second = results[1]!;
    const secondTotal = second.layers.reduce((a, l) => a + l.compressedSize, 0);

    // skopeo copy + umoci unpack, same images, same registry
    const t1 = performance.now();
    for (let i = 0; i < N; i++) {
      run('skopeo', ['copy', '--quiet', '--src-tls-verify=false', names[i]!, `oci:${join(work, 'oci')}:t${i}`]);
      run('umoci', ['unpack', '--image', `${join(work, 'oci')}:t${i}`, join(work, `bundle-${i}`)]);
    }
    const baseSeconds = (performance.now() - t1) / 1000;
    const unpackedBytes = Array.from({ length: N }, (_, i) => duBytes(join(work, `bundle-${i}`, 'rootfs'))).reduce((a, n) => a + n, 0);

    const out = {
      images: N,
      import: {
        peakRssMiB: +peakRssMiB.toFixed(0),
        minisandboxSeconds: +msSeconds.toFixed(2),
        skopeoUmociSeconds: +baseSeconds.toFixed(2),
        speedup: +(baseSeconds / msSeconds).toFixed(2),
      },
      bytes: {
        minisandboxRegistry: msBytes,
        imageRegistry: imageRegistryBytes,
        perTaskCompressedImages: perTaskCompressed,
        unpackedRootfsTotal: unpackedBytes,
        registryToImageRegistry: +(msBytes / imageRegistryBytes).toFixed(3),
        registryToPerTaskCompressed: +(msBytes / perTaskCompressed).toFixed(3),
      },
      secondImage: {
        fetched: second.fetchedBytes,
        compressedTotal: secondTotal,
        fetchedShare: +(second.fetchedBytes / secondTotal).toFixed(3),
        layersConverted: second.layers.filter((l) => l.converted).length,
        layers: second.layers.length,
      },
    };
    console.log(JSON.stringify(out, null, 2));
    console.log(
      [
        `import of ${N} images: minisandbox ${msSeconds.toFixed(1)} s vs skopeo copy + umoci unpack ${baseSeconds.toFixed(1)} s (${out.import.speedup}x)`,
        `registry bytes: minisandbox ${fmt(msBytes)} vs image registry ${fmt(imageRegistryBytes)} (${out.bytes.registryToImageRegistry}) ` +
          `vs one compressed image per task ${fmt(perTaskCompressed)} (${out.bytes.registryToPerTaskCompressed})`,
        `second image fetched ${fmt(second.fetchedBytes)} of ${fmt(secondTotal)} (${out.secondImage.fetchedShare}); ` +
          `converted ${out.secondImage.layersConverted} of ${out.secondImage.layers} layers`,
      ].join('\n'),
    );
  } finally {
    await registry.stop();
    // BENCH_KEEP=1 leaves the registries and stores for a look at where the bytes are
    if (process.env['BENCH_KEEP'] === '1') console.log(`kept ${work}`);
    else removeWorkDir(work);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
