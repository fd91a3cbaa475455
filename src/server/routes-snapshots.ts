/**
 * Snapshots of this node: take one of a sandbox (optionally pushed to the registry), list, delete.
 * Creating from one is POST /v1/sandboxes {"snapshot"}; resetting to one is .../reset {"snapshot"}.
 */
import type { FastifyInstance } from 'fastify';
import type { SnapshotRecord } from '../runtime/snapshot.js';
import { type RouteContext, parse } from './http.js';
import { IdParamsSchema, SnapParamsSchema, SnapshotBodySchema } from './schemas.js';

/** The wire shape: snake_case, the API's. */
export function snapshotBody(r: SnapshotRecord): Record<string, unknown> {
  return {
    snapshot: r.id,
    layer: r.layer,
    env: r.env,
    ...(r.parentRef === undefined ? {} : { parent_ref: r.parentRef }),
    sandbox: r.sandbox,
    created_at: r.createdAt,
    size: r.size,
    ...(r.pushed.length === 0 ? {} : { ref: r.pushed.at(-1), pushed: r.pushed }),
  };
}

export function snapshotRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr } = ctx;
  app.post('/v1/sandboxes/:id/snapshot', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(SnapshotBodySchema, req.body, 'body');
    const r = await mgr.snapshot(id, { push: b.push, ...(b.tag === undefined ? {} : { tag: b.tag }) });
    return reply.code(201).send(snapshotBody(r));
  });

  app.get('/v1/snapshots', async () => ({ snapshots: (await mgr.snapshotsOrFail().list()).map(snapshotBody) }));

  app.delete('/v1/snapshots/:snap', async (req, reply) => {
    const { snap } = parse(SnapParamsSchema, req.params, 'path');
    await mgr.snapshotsOrFail().delete(snap);
    return reply.code(204).send();
  });
}
