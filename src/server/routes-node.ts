/**
 * The node: capacity (sandboxes and memory) and pre-warming environments into its store.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { MinisandboxError } from '../errors.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import type { SandboxManager } from './manager.js';
import { datasetRefs, prewarm } from './prewarm.js';
import { PrewarmBodySchema } from './schemas.js';

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
  return { live: mgr.live, max: mgr.max, memory: { total_bytes: mem.total, available_bytes: mem.available, sandboxes_bytes: sandboxes } };
}

export function nodeRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.get('/v1/capacity', async () => capacity(ctx.mgr));

  app.post('/v1/prewarm', async (req, reply) => {
    const b = parse(PrewarmBodySchema, req.body, 'body');
    const { reg, store } = ctx;
    if (reg === undefined || store === undefined)
      throw new MinisandboxError('NOT_CONFIGURED', 'this server has no store and registry to pre-warm', { hint: 'pre-warm through `minisandbox serve`' });
    const refs = b.refs ?? (b.instance_ids === undefined ? await datasetRefs(reg, b.dataset!) : b.instance_ids.map((i) => `${b.dataset}/${i}`));
    return { results: await prewarm(reg, store, refs, { signal: disconnectSignal(reply) }) };
  });
}
