/**
 * Exec jobs (started with POST /v1/sandboxes/:id/exec?async=true): list, status with a long poll,
 * kill. See jobs.ts for their lifetime.
 */
import type { FastifyInstance } from 'fastify';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import { jobInfo, jobsOf, waitFor } from './jobs.js';
import { jsonReply } from './json-reply.js';
import { IdParamsSchema, JobParamsSchema, JobWaitQuerySchema } from './schemas.js';

export function jobRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr } = ctx;
  app.get('/v1/sandboxes/:id/jobs', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    return jsonReply(reply, { jobs: jobsOf(mgr.get(id), mgr.jobLimits).list() });
  });

  app.get('/v1/sandboxes/:id/jobs/:job', async (req, reply) => {
    const { id, job } = parse(JobParamsSchema, req.params, 'path');
    const q = parse(JobWaitQuerySchema, req.query, 'query');
    const j = jobsOf(mgr.get(id), mgr.jobLimits).get(job);
    await waitFor(j, Math.round((q.wait ?? 0) * 1000), disconnectSignal(reply));
    return jsonReply(reply, jobInfo(j));
  });

  app.delete('/v1/sandboxes/:id/jobs/:job', async (req, reply) => {
    const { id, job } = parse(JobParamsSchema, req.params, 'path');
    await jobsOf(mgr.get(id), mgr.jobLimits).kill(job);
    return reply.code(204).send();
  });
}
