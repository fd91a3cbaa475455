/**
 * The server's overhead: create -> exec `true` -> delete over HTTP (startServer on 127.0.0.1, in
 * this process) against the same through the in-process library (openSandbox, exec, destroy), at
 * concurrency 1 and 16, p50 and p99 of each cycle, and the ratio HTTP / library (aim <= 1.3x).
 * Both sides run in the same run over the same store, in alternating rounds. The environment is a
 * busybox root pushed to a temp registry and pulled once before timing.
 * Scale: BENCH_CYCLES (cycles per concurrency level and side; default 48).
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { populateBusyboxRoot } from '../src/recipe/base-rootfs.js';
import { LocalRegistry } from '../src/registry/local.js';
import { openSandbox } from '../src/runtime/open.js';
import { startServer } from '../src/server/serve.js';
import { StorePaths } from '../src/store/paths.js';
import { pushTree } from '../src/publish/push.js';

const CYCLES = Number(process.env.BENCH_CYCLES ?? 48);
const REF = 'bench/busybox';

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Runs `n` cycles with `conc` in flight at once; the wall time of each cycle in ms. */
async function measure(n: number, conc: number, cycle: () => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  let left = n;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (left-- > 0) {
        const t = performance.now();
        await cycle();
        times.push(performance.now() - t);
      }
    }),
  );
  return times;
}

const work = mkdtempSync(join(tmpdir(), 'ms-bench-serve-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const srv = await (async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: REF });
  return startServer(
    reg,
    store,
    { listen: { host: '127.0.0.1', port: 0 }, tokenFile: join(work, 'token'), maxSandboxes: 64, idleTimeoutMs: 600_000, ttlMs: 3_600_000 },
    () => undefined,
  );
})();
try {
  const headers = { authorization: `Bearer ${readFileSync(join(work, 'token'), 'utf8').trim()}`, 'content-type': 'application/json' };
  const http = async (): Promise<void> => {
    const c = await fetch(`${srv.url}/v1/sandboxes`, { method: 'POST', headers, body: JSON.stringify({ ref: REF }) });
    if (c.status !== 201) throw new Error(`create: ${c.status} ${await c.text()}`);
    const { id } = (await c.json()) as { id: string };
    const e = (await (
      await fetch(`${srv.url}/v1/sandboxes/${id}/exec`, { method: 'POST', headers, body: JSON.stringify({ argv: ['/bin/busybox', 'true'] }) })
    ).json()) as { exit_code: number };
    if (e.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(e)}`);
    const d = await fetch(`${srv.url}/v1/sandboxes/${id}`, { method: 'DELETE', headers });
    if (d.status !== 204) throw new Error(`delete: ${d.status} ${await d.text()}`);
  };
  const lib = async (): Promise<void> => {
    const sb = await openSandbox(reg, store, REF);
    try {
      const o = await sb.exec(['/bin/busybox', 'true']);
      if (o.exitCode !== 0) throw new Error(`exec: ${JSON.stringify(o)}`);
    } finally {
      await sb.destroy();
    }
  };
  await lib(); // pulls the environment: what follows times sandboxes over a pulled one
  await http();
  console.log(`create -> exec true -> delete, ${CYCLES} cycles per side and level (ms)`);
  for (const conc of [1, 16]) {
    const h: number[] = [];
    const l: number[] = [];
    // alternating halves, so drift in the machine's load falls on both sides
    for (let round = 0; round < 2; round++) {
      l.push(...(await measure(CYCLES / 2, conc, lib)));
      h.push(...(await measure(CYCLES / 2, conc, http)));
    }
    const [h50, h99, l50, l99] = [pct(h, 50), pct(h, 99), pct(l, 50), pct(l, 99)];
    console.log(
      `concurrency ${String(conc).padStart(2)}: http p50 ${h50.toFixed(1)} p99 ${h99.toFixed(1)} | library p50 ` +
        `${l50.toFixed(1)} p99 ${l99.toFixed(1)} | ratio p50 ${(h50 / l50).toFixed(2)}x p99 ${(h99 / l99).toFixed(2)}x`,
    );
  }
} finally {
  await srv.close();
  rmSync(work, { recursive: true, force: true });
}
