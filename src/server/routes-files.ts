/**
 * Files read and written inside the sandbox's own root, and the repository's diff against its base.
 */
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { BodyTooLargeError, busyUntil, readFileStream, spoolBody, withSpoolDir, writeFileFrom } from './file-transfer.js';
import { DiffTooLargeError } from '../sandbox/sandbox.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import { MemoryBudgetError, outputGrant, replyAccount } from './request-memory.js';
import { DiffQuerySchema, FileQuerySchema, IdParamsSchema } from './schemas.js';

/** Permission bits as stat's `%a` prints them. */
const FILE_MODE = /^[0-7]{1,4}$/;

export function fileRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr, fileLimit } = ctx;
  // a file body reaches the route as the request stream: spooled, counted, never held whole
  app.addContentTypeParser('application/octet-stream', (_req, payload, done) => done(null, payload));

  app.get('/v1/sandboxes/:id/files', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(FileQuerySchema, req.query, 'query');
    const signal = disconnectSignal(reply);
    // read and stat inside the sandbox: a planted symlink resolves in the sandbox's own root
    const read = await mgr.use(id, async (e) => {
      const r = await readFileStream(e.sb, q.path, { limit: fileLimit, signal });
      busyUntil(e, r.done);
      return r;
    });
    // what the sandbox's stat printed is the tenant's to choose: only permission bits go in a header
    if (read.mode !== undefined && FILE_MODE.test(read.mode)) void reply.header('x-file-mode', read.mode);
    return reply.type('application/octet-stream').send(read.body);
  });

  app.put('/v1/sandboxes/:id/files', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(FileQuerySchema, req.query, 'query');
    const body = req.body as Readable | undefined;
    if (body === undefined || typeof (body as { pipe?: unknown }).pipe !== 'function')
      throw new InvalidInputError('body: send the file bytes as application/octet-stream', 'set Content-Type: application/octet-stream');
    if (Number(req.headers['content-length'] ?? 0) > fileLimit) throw new BodyTooLargeError(fileLimit);
    const signal = disconnectSignal(reply);
    await mgr.use(id, (e) =>
      withSpoolDir(ctx.store, 'upload-', async (dir) => {
        // the body is spooled whole before the write starts: one that breaks off writes nothing
        const spooled = join(dir, 'body');
        try {
          await spoolBody(body, fileLimit, spooled, signal);
        } finally {
          // whatever was not read is drained, so the client gets its answer
          if (!body.readableEnded) body.resume();
        }
        try {
          await writeFileFrom(e.sb, q.path, spooled, { ...(q.mode === undefined ? {} : { mode: q.mode }), signal });
        } catch (err) {
          // a failed write is not a missing file (SANDBOX_FILE answers 404 for reads): say 422
          if (err instanceof MinisandboxError && err.code === 'SANDBOX_FILE') throw new InvalidInputError(err.message, err.hint);
          throw err;
        }
      }),
    );
    return reply.code(204).send();
  });

  app.get('/v1/sandboxes/:id/diff', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(DiffQuerySchema, req.query, 'query');
    // the patch is held whole (its bytes, then its text): it takes from the memory budget
    const outputBudget = outputGrant(replyAccount(mgr.memory, reply));
    const patch = await mgr
      .use(id, (e) =>
        e.sb.diff({ ...(q.workdir === undefined ? {} : { workdir: q.workdir }), ...(q.base === undefined ? {} : { base: q.base }), outputBudget }),
      )
      .catch((err: unknown) => {
        throw err instanceof DiffTooLargeError && err.budgetCut ? new MemoryBudgetError('the patch', mgr.memory) : err;
      });
    return reply.type('text/x-diff; charset=utf-8').send(patch);
  });
}
