/**
 * S3 registry (loopback s3rver in a child process) against the local directory registry, on the
 * same generated content (incompressible blobs at realistic pack sizes):
 *   push        putBlobFile of every blob, 4 at a time
 *   pull        openBlob of every blob streamed through sha256 (verified, then discarded), 4 at a time
 *   range       random 64 KiB getBlobRange reads (one object out of a pack): median and p99
 *   dataset     pulling N environments that share a base (copyRefs, only missing blobs) against
 *               fetching one self-contained image blob per instance from the same server
 *   store       the store's real pushTree and pullEnv (capture, packs, lay-out) of a real directory
 *               (default /usr/lib/python3.11, BENCH_S3_TREE=DIR to change) to each registry
 * Prints throughput, requests per GB (S3 requests counted in the SDK middleware) and ratios.
 *
 *   npx tsx bench/s3.ts                   # ~200 MiB of packs, 8 environments
 *   BENCH_S3_SCALE=4 npx tsx bench/s3.ts  # four times the packs and environments
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Digest, sha256 } from '../src/cas/digest.js';
import { copyRefs } from '../src/registry/copy.js';
import { LocalRegistry } from '../src/registry/local.js';
import type { Registry } from '../src/registry/registry.js';
import { S3Registry } from '../src/registry/s3.js';
import { StorePaths } from '../src/store/paths.js';
import { pullEnv } from '../src/store/pull.js';
import { pushTree } from '../src/publish/push.js';
import { pushFakeEnv } from '../test/s3/fake-env.js';
import { startS3Server } from '../test/s3/server.js';

const MiB = 1024 * 1024;
const scale = Math.max(1, Number(process.env.BENCH_S3_SCALE ?? '1'));
const SIZES: [count: number, size: number][] = [
  [2 * scale, 48 * MiB],
  [4 * scale, 16 * MiB],
  [16 * scale, 2 * MiB],
  [64 * scale, 64 * 1024],
];
const RANGE_READS = 200;
const ENVS = 8 * scale;

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
}

async function pool<T>(items: T[], n: number, f: (x: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (i < items.length) await f(items[i++] as T);
    }),
  );
}

async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await f();
  return (performance.now() - t0) / 1000;
}

interface Side {
  name: string;
  reg: Registry;
  requests: () => number;
}

async function main(): Promise<void> {
  // Sources on tmpfs, registries on disk: the local push is a real copy, not a hardlink.
  const src = await mkdtemp(join('/dev/shm', 'bench-s3-src-'));
  const work = await mkdtemp(join(tmpdir(), 'bench-s3-'));
  const server = await startS3Server();
  try {
    const blobs: { digest: Digest; path: string; size: number }[] = [];
    for (const [count, size] of SIZES) {
      for (let i = 0; i < count; i++) {
        const data = randomBytes(size);
        const digest = sha256(data);
        const path = join(src, digest.slice(7));
        await writeFile(path, data);
        blobs.push({ digest, path, size });
      }
    }
    const totalBytes = blobs.reduce((a, b) => a + b.size, 0);
    const GB = totalBytes / 1e9;

    let s3Requests = 0;
    const s3 = new S3Registry(`s3://${server.bucket}/bench`, { endpoint: server.endpoint, region: server.region, credentials: server.credentials });
    s3.client.middlewareStack.add(
      (next) => async (args) => {
        s3Requests++;
        return next(args);
      },
      { step: 'finalizeRequest', name: 'benchRequestCounter' },
    );
    const local = new LocalRegistry(join(work, 'local'));
    const sides: Side[] = [
      { name: 'local', reg: local, requests: () => 0 },
      { name: 's3', reg: s3, requests: () => s3Requests },
    ];

    console.log(
      `content: ${blobs.length} blobs, ${(totalBytes / MiB).toFixed(0)} MiB (sizes ` +
        `${SIZES.map(([c, s]) => `${c}x${s >= MiB ? `${s / MiB}MiB` : `${s / 1024}KiB`}`).join(', ')})`,
    );
    const results: Record<string, { push: number; pull: number; pushReq: number; pullReq: number; rangeMed: number; rangeP99: number; rangeReq: number }> = {};
    for (const side of sides) {
      let r0 = side.requests();
      const push = await timed(() => pool(blobs, 4, (b) => side.reg.putBlobFile(b.digest, b.path)));
      const pushReq = side.requests() - r0;
      r0 = side.requests();
      const pull = await timed(() =>
        pool(blobs, 4, async (b) => {
          const h = createHash('sha256');
          for await (const c of await side.reg.openBlob(b.digest)) h.update(c as Buffer);
          if (`sha256:${h.digest('hex')}` !== b.digest) throw new Error(`digest mismatch on ${side.name}`);
        }),
      );
      const pullReq = side.requests() - r0;
      const big = blobs.filter((b) => b.size >= 16 * MiB);
      const lat: number[] = [];
      r0 = side.requests();
      for (let i = 0; i < RANGE_READS; i++) {
        const b = big[i % big.length]!;
        const off = Math.floor(Math.random() * (b.size - 65536));
        const t0 = performance.now();
        const got = await side.reg.getBlobRange(b.digest, off, 65536);
        lat.push(performance.now() - t0);
        if (got.length !== 65536) throw new Error('short range');
      }
      results[side.name] = { push, pull, pushReq, pullReq, rangeMed: quantile(lat, 0.5), rangeP99: quantile(lat, 0.99), rangeReq: side.requests() - r0 };
    }

    const mbps = (sec: number): string => `${(totalBytes / MiB / sec).toFixed(0)} MiB/s`;
    console.log('\nside    push          pull          push req/GB  pull req/GB  range64K p50   p99');
    for (const [name, r] of Object.entries(results)) {
      console.log(
        `${name.padEnd(7)} ${mbps(r.push).padEnd(13)} ${mbps(r.pull).padEnd(13)} ${(r.pushReq / GB).toFixed(0).padStart(11)}  ` +
          `${(r.pullReq / GB).toFixed(0).padStart(11)}  ${r.rangeMed.toFixed(2).padStart(8)} ms ${r.rangeP99.toFixed(2).padStart(6)} ms`,
      );
    }
    const l = results.local!;
    const s = results.s3!;
    console.log(
      `ratios s3/local: push time ${(s.push / l.push).toFixed(2)}x, pull time ${(s.pull / l.pull).toFixed(2)}x, ` +
        `range p50 ${(s.rangeMed / l.rangeMed).toFixed(2)}x, range p99 ${(s.rangeP99 / l.rangeP99).toFixed(2)}x`,
    );
    console.log(
      `s3 requests per range read: ${(s.rangeReq / RANGE_READS).toFixed(2)}; multipart part size 16 MiB; ` +
        `in-flight peak ${s3.budget.peakRequests} requests, ${(s3.budget.peakBytes / MiB).toFixed(0)} MiB`,
    );

    // Dataset pull: envs share a 32 MiB base and each adds 2 MiB, against one image blob per instance.
    const staging = new LocalRegistry(join(work, 'staging'));
    const base = await pushFakeEnv(staging, 'base', { packSizes: [16 * MiB, 16 * MiB], scratch: src });
    const refs: string[] = [];
    for (let i = 0; i < ENVS; i++) {
      await pushFakeEnv(staging, `ds/i${i}`, { packSizes: [2 * MiB], reuse: base.packs, scratch: src });
      refs.push(`ds/i${i}`);
    }
    const ds = new S3Registry(`s3://${server.bucket}/bench-ds`, { endpoint: server.endpoint, region: server.region, credentials: server.credentials });
    let dsRequests = 0;
    ds.client.middlewareStack.add(
      (next) => async (args) => {
        dsRequests++;
        return next(args);
      },
      { step: 'finalizeRequest', name: 'benchRequestCounter' },
    );
    await copyRefs(staging, ds, refs);
    const images: Digest[] = [];
    for (let i = 0; i < ENVS; i++) {
      const data = randomBytes(34 * MiB);
      const d = sha256(data);
      const p = join(src, `image-${i}`);
      await writeFile(p, data);
      await ds.putBlobFile(d, p);
      await rm(p);
      images.push(d);
    }
    let r0 = dsRequests;
    const node = new LocalRegistry(join(work, 'node'));
    let pulled = 0;
    const dedupSec = await timed(async () => {
      const sum = await copyRefs(ds, node, refs, { tmpDir: join(work, 'tmp') });
      pulled = sum.bytesCopied;
    });
    const dedupReq = dsRequests - r0;
    r0 = dsRequests;
    let imageBytes = 0;
    const imageSec = await timed(() =>
      pool(images, 4, async (d) => {
        const h = createHash('sha256');
        const out = join(work, `img-${d.slice(7, 19)}`);
        const chunks: Buffer[] = [];
        for await (const c of await ds.openBlob(d)) {
          h.update(c as Buffer);
          chunks.push(c as Buffer);
          imageBytes += (c as Buffer).length;
          if (chunks.length > 64) await writeFile(out, chunks.splice(0), { flag: 'a' });
        }
        await writeFile(out, chunks, { flag: 'a' });
        if (`sha256:${h.digest('hex')}` !== d) throw new Error('image digest mismatch');
        await rm(out);
      }),
    );
    const imageReq = dsRequests - r0;
    console.log(`\ndataset of ${ENVS} environments (32 MiB shared base + 2 MiB each) pulled from s3 into a node registry:`);
    console.log(`  minisandbox (only missing blobs, verified): ${(pulled / MiB).toFixed(0)} MiB, ${dedupSec.toFixed(2)} s, ${dedupReq} requests`);
    console.log(`  one image per instance (34 MiB each):       ${(imageBytes / MiB).toFixed(0)} MiB, ${imageSec.toFixed(2)} s, ${imageReq} requests`);
    console.log(`  ratio minisandbox/images: bytes ${(pulled / imageBytes).toFixed(3)}, time ${(dedupSec / imageSec).toFixed(3)}`);

    const tree = process.env.BENCH_S3_TREE ?? '/usr/lib/python3.11';
    console.log(`\nstore push (pushTree) and pull into an empty store (pullEnv) of ${tree}:`);
    const storeRows: Record<string, { push: number; pull: number; reqs: number; bytes: number }> = {};
    for (const side of [
      { name: 'local', reg: new LocalRegistry(join(work, 'store-local')) as Registry, requests: () => 0 },
      {
        name: 's3',
        reg: new S3Registry(`s3://${server.bucket}/bench-store`, {
          endpoint: server.endpoint,
          region: server.region,
          credentials: server.credentials,
        }) as Registry,
        requests: () => s3Requests,
      },
    ]) {
      if (side.reg instanceof S3Registry) {
        side.reg.client.middlewareStack.add(
          (next) => async (args) => {
            s3Requests++;
            return next(args);
          },
          { step: 'finalizeRequest', name: 'benchRequestCounter' },
        );
      }
      const r0 = side.requests();
      let bytes = 0;
      const push = await timed(async () => {
        bytes = (await pushTree(side.reg, new StorePaths(join(work, `push-store-${side.name}`)), tree, { tag: 'bench/tree' })).newBytes;
      });
      const pull = await timed(async () => {
        await pullEnv(side.reg, new StorePaths(join(work, `pull-store-${side.name}`)), 'bench/tree');
      });
      storeRows[side.name] = { push, pull, reqs: side.requests() - r0, bytes };
      if (side.reg instanceof S3Registry) side.reg.close();
    }
    for (const [name, r] of Object.entries(storeRows)) {
      console.log(
        `  ${name.padEnd(6)} push ${r.push.toFixed(2)} s, pull ${r.pull.toFixed(2)} s, ${(r.bytes / MiB).toFixed(1)} MiB of packs, ${r.reqs} requests`,
      );
    }
    console.log(
      `  ratio s3/local: push ${(storeRows.s3!.push / storeRows.local!.push).toFixed(2)}x, pull ${(storeRows.s3!.pull / storeRows.local!.pull).toFixed(2)}x`,
    );
    s3.close();
    ds.close();
  } finally {
    await server.stop();
    await rm(src, { recursive: true, force: true });
    await rm(work, { recursive: true, force: true });
  }
}

await main();
