/**
 * The node: capacity (sandboxes and memory), what its store holds (for a pool's placement), and
 * environments brought into its store ahead of creates: now (prewarm) or in the background (prefetch).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { MinisandboxError } from '../errors.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import type { NodeHolds } from './holds.js';
import type { SandboxManager } from './manager.js';
import type { NodePrefetch } from './node-prefetch.js';
import { datasetRefs, prewarm } from './prewarm.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from '../store/paths.js';
import { HoldsBodySchema, PrefetchBodySchema, PrewarmBodySchema } from './schemas.js';

async function meminfo(): Promise<{ total: number; available: number }> {
  const text = await readFile('/proc/meminfo', 'utf8');
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB$`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { total: kb('MemTotal'), available: kb('MemAvailable') || kb('MemFree') };
}

/** What a sandbox's cgroup charges now (v2 memory.current, v1 memory.usage_in_bytes); 0 without one. */
async function cgroupMemory(dirs: readonly string[]): Promise<number> {
  for (const d of dirs) {
    for (const f of ['memory.current', 'memory.usage_in_bytes']) {
      const v = await readFile(join(d, f), 'utf8').catch(() => undefined);
      if (v !== undefined && /^\d+\s*$/.test(v)) return Number(v);
    }
  }
  return 0;
}

export async function capacity(mgr: SandboxManager): Promise<Record<string, unknown>> {
  const mem = await meminfo();
  let sandboxes = 0;
  // every sandbox held, evaluations' included: they use the node's memory as much as a client's
  for (const e of mgr.held()) {
    try {
      if (e.sb.alive) sandboxes += await cgroupMemory(e.sb.state.cgroupDirs);
    } catch {
      // ended meanwhile: it holds nothing
    }
  }
  return {
    node: mgr.opts.node?.name ?? null,
    live: mgr.live,
    max: mgr.max,
    // what a pool places by: slots not held (creates in flight hold theirs, see the manager)
    free: Math.max(0, mgr.max - mgr.live),
    memory: { total_bytes: mem.total, available_bytes: mem.available, sandboxes_bytes: sandboxes },
  };
}

/** The refs a body names: its refs, the given instances of its dataset, or every env tagged `<dataset>/*`. */
async function refsOf(reg: Registry, b: { refs?: string[] | undefined; dataset?: string | undefined; instance_ids?: string[] | undefined }): Promise<string[]> {
  if (b.refs !== undefined) return b.refs;
  return b.instance_ids === undefined ? datasetRefs(reg, b.dataset!) : b.instance_ids.map((i) => `${b.dataset}/${i}`);
}

function storeOf(ctx: RouteContext, what: string): { reg: Registry; store: StorePaths; holds: NodeHolds; prefetch: NodePrefetch } {
  const { reg, store, holds, prefetch } = ctx;
  if (reg === undefined || store === undefined || holds === undefined || prefetch === undefined)
    throw new MinisandboxError('NOT_CONFIGURED', `this server has no store and registry to ${what}`, { hint: `${what} through \`minisandbox serve\`` });
  return { reg, store, holds, prefetch };
}

export function nodeRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.get('/v1/capacity', async () => capacity(ctx.mgr));

  app.post('/v1/prewarm', async (req, reply) => {
    const b = parse(PrewarmBodySchema, req.body, 'body');
    const { reg, store } = storeOf(ctx, 'pre-warm');
    return { results: await prewarm(reg, store, await refsOf(reg, b), { signal: disconnectSignal(reply) }) };
  });

  app.post('/v1/holds', async (req) => {
    const b = parse(HoldsBodySchema, req.body, 'body');
    const { reg, holds } = storeOf(ctx, 'say what it holds');
    return { node: ctx.mgr.opts.node?.name ?? null, holds: await holds.of(await refsOf(reg, b)) };
  });

  app.post('/v1/prefetch', async (req, reply) => {
    const b = parse(PrefetchBodySchema, req.body, 'body');
    const { reg, prefetch } = storeOf(ctx, 'prefetch');
    return reply.code(202).send(prefetch.start(await refsOf(reg, b), b.io_budget));
  });

  app.get('/v1/prefetch', async () => storeOf(ctx, 'prefetch').prefetch.status());
}
