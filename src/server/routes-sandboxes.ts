/**
 * Sandboxes: create (pulled on demand, or from a snapshot), list, look up, destroy, fork, reset.
 */
import type { FastifyInstance } from 'fastify';
import type { OpenOptions } from '../runtime/open.js';
import { allowedMounts } from './mount-policy.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import { CreateSandboxBodySchema, ForkBodySchema, IdParamsSchema, ResetBodySchema } from './schemas.js';

export function sandboxRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr, log } = ctx;
  app.post('/v1/sandboxes', async (req, reply) => {
    const b = parse(CreateSandboxBodySchema, req.body, 'body');
    const limits: NonNullable<OpenOptions['limits']> = {};
    if (b.limits?.cpus !== undefined) limits.cpus = b.limits.cpus;
    if (b.limits?.memory !== undefined) limits.memoryBytes = b.limits.memory;
    if (b.limits?.pids !== undefined) limits.pids = b.limits.pids;
    if (b.limits?.disk !== undefined) limits.diskBytes = b.limits.disk;
    if (b.limits?.nice !== undefined) limits.nice = b.limits.nice;
    const config: NonNullable<OpenOptions['config']> = {};
    if (b.env !== undefined) config.env = b.env;
    if (b.workdir !== undefined) config.workdir = b.workdir;
    const opts: OpenOptions = {
      limits,
      config,
      network: b.network ?? 'none',
      ...(b.prewarm_reset === true ? { prewarmReset: true } : {}),
      ...(b.mounts === undefined ? {} : { mounts: allowedMounts(b.mounts, ctx.allowMounts ?? []) }),
      signal: disconnectSignal(reply),
      warn: (message) => log(JSON.stringify({ time: new Date().toISOString(), req: req.id, event: 'warning', message })),
    };
    const e =
      b.snapshot !== undefined
        ? await mgr.createFromSnapshot(b.snapshot, opts, b.ttl)
        : await mgr.create(b.ref ?? `${b.dataset}/${b.instance_id}`, opts, b.ttl);
    return reply.code(201).send(mgr.info(e));
  });

  app.get('/v1/sandboxes', async () => ({ sandboxes: mgr.list() }));
  app.get('/v1/sandboxes/:id', async (req) => mgr.info(mgr.get(parse(IdParamsSchema, req.params, 'path').id)));
  app.delete('/v1/sandboxes/:id', async (req, reply) => {
    await mgr.destroy(parse(IdParamsSchema, req.params, 'path').id);
    return reply.code(204).send();
  });

  app.post('/v1/sandboxes/:id/fork', async (req) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(ForkBodySchema, req.body, 'body');
    return { children: await mgr.fork(id, b.count, b.session) };
  });

  app.post('/v1/sandboxes/:id/reset', async (req) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(ResetBodySchema, req.body, 'body');
    return mgr.reset(id, b.snapshot !== undefined ? { snapshot: b.snapshot } : b.ref !== undefined ? { ref: b.ref } : undefined);
  });
}
