/**
 * Files read and written inside the sandbox's own root, and the repository's diff against its base.
 */
import type { FastifyInstance } from 'fastify';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import { type RouteContext, parse } from './http.js';
import { DiffQuerySchema, FileQuerySchema, IdParamsSchema } from './schemas.js';

/** Permission bits as stat's `%a` prints them. */
const FILE_MODE = /^[0-7]{1,4}$/;

export function fileRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr, fileLimit } = ctx;
  app.get('/v1/sandboxes/:id/files', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(FileQuerySchema, req.query, 'query');
    // read and stat inside the sandbox: a planted symlink resolves in the sandbox's own root
    const [data, mode] = await mgr.use(id, async (e) => {
      const bytes = await e.sb.readFile(q.path, { maxBytes: fileLimit });
      const st = await e.sb.exec(['/bin/sh', '-c', 'exec stat -L -c %a -- "$1"', 'msb-stat', q.path], { timeoutMs: 30_000 });
      return [bytes, st.status === 'ok' && st.exitCode === 0 ? st.stdout.trim() : undefined] as const;
    });
    // what the sandbox's stat printed is the tenant's to choose: only permission bits go in a header
    if (mode !== undefined && FILE_MODE.test(mode)) void reply.header('x-file-mode', mode);
    return reply.type('application/octet-stream').send(data);
  });

  app.put('/v1/sandboxes/:id/files', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(FileQuerySchema, req.query, 'query');
    if (!Buffer.isBuffer(req.body))
      throw new InvalidInputError('body: send the file bytes as application/octet-stream', 'set Content-Type: application/octet-stream');
    const body = req.body;
    await mgr.use(id, async (e) => {
      try {
        await e.sb.writeFile(q.path, body, q.mode === undefined ? {} : { mode: q.mode });
      } catch (err) {
        // a failed write is not a missing file (SANDBOX_FILE answers 404 for reads): say 422
        if (err instanceof MinisandboxError && err.code === 'SANDBOX_FILE') throw new InvalidInputError(err.message, err.hint);
        throw err;
      }
    });
    return reply.code(204).send();
  });

  app.get('/v1/sandboxes/:id/diff', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(DiffQuerySchema, req.query, 'query');
    const patch = await mgr.use(id, (e) =>
      e.sb.diff({ ...(q.workdir === undefined ? {} : { workdir: q.workdir }), ...(q.base === undefined ? {} : { base: q.base }) }),
    );
    return reply.type('text/x-diff; charset=utf-8').send(patch);
  });
}
