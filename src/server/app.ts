/**
 * The HTTP face of a SandboxManager: fastify routes for the native API (`/v1`), token auth on every
 * request (before any body is read), a JSON-lines request log, `/metrics`, and one error shape,
 * `{"error": {"code", "message", "hint", "field"?}}`, whose code is one of errors.ts' ErrorCode.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { InvalidInputError, MinisandboxError, type ErrorCode } from '../errors.js';
import type { OpenOptions } from '../runtime/open.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { Session } from '../sandbox/session.js';
import { CapacityError, type SandboxManager } from './manager.js';
import {
  CreateSandboxBodySchema,
  CreateSessionBodySchema,
  DiffQuerySchema,
  ExecBodySchema,
  FileQuerySchema,
  ForkBodySchema,
  IdParamsSchema,
  SessionParamsSchema,
  SessionRunBodySchema,
} from './schemas.js';

export interface AppOptions {
  token: string;
  /** Largest JSON body, in bytes (413 beyond). */
  bodyLimit?: number;
  /** Largest file written with PUT /files, in bytes (413 beyond); also the largest file read. */
  fileLimit?: number;
  /** Where the JSON-lines request log goes (one line per request); default stderr. */
  log?: (line: string) => void;
}

const STATUS: Partial<Record<ErrorCode, number>> = {
  UNAUTHORIZED: 401,
  NOT_FOUND: 404,
  INVALID_INPUT: 422,
  UNSAFE_PATH: 422,
  DIFF_FAILED: 422,
  CAPACITY: 429,
  BODY_TOO_LARGE: 413,
  MALFORMED_BODY: 400,
  SANDBOX_DESTROYED: 410,
  SESSION_CLOSED: 410,
  ABORTED: 499,
  SANDBOX_FILE: 404,
};

/** A request field that failed its schema: answered 422 with the field's dotted path. */
class FieldError extends InvalidInputError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message, 'see the API reference in README.md (section "Sandbox server")');
  }
}

/** A schema failure names the field: `body field limits.memory: a size: ...`. */
function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const field = issue.path.map(String).join('.');
  throw new FieldError(field, `${where}${field === '' ? '' : ` field ${field}`}: ${issue.message}`);
}

function tokenDigest(t: string): Buffer {
  return createHash('sha256').update(t).digest();
}

function outcomeBody(o: CommandOutcome): Record<string, unknown> {
  return {
    stdout: o.stdout,
    stderr: o.stderr,
    exit_code: o.exitCode,
    outcome: o.status,
    signal: o.signal,
    stdout_truncated: o.stdoutTruncated,
    stderr_truncated: o.stderrTruncated,
    duration_ms: Math.round(o.durationMs * 1000) / 1000,
    ...(o.error === undefined ? {} : { error: o.error }),
  };
}

/** Aborts when the client goes away before its answer was sent: a disconnect kills the command. */
function disconnectSignal(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) ac.abort(new Error('the client disconnected'));
  });
  return ac.signal;
}

export function buildApp(mgr: SandboxManager, opts: AppOptions): FastifyInstance {
  const want = tokenDigest(opts.token);
  const log = opts.log ?? ((l: string) => void process.stderr.write(`${l}\n`));
  const fileLimit = opts.fileLimit ?? 256 << 20;
  const app = Fastify({ logger: false, bodyLimit: opts.bodyLimit ?? 8 << 20 });

  // Clients that send `Content-Type: application/json` on every request (a session object with
  // default headers) send it on DELETE and GET too, with no body: that is no body, not bad JSON.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text) as unknown);
    } catch (e) {
      done(
        new MinisandboxError('MALFORMED_BODY', `the body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`, { hint: 'send a JSON object' }),
        undefined,
      );
    }
  });
  // A file body is raw bytes, up to its own limit.
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer', bodyLimit: fileLimit }, (_req, body, done) => done(null, body));

  app.addHook('onRequest', async (req) => {
    const auth = req.headers.authorization;
    const key = req.headers['x-api-key'];
    const given = typeof auth === 'string' && auth.startsWith('Bearer ') ? auth.slice(7) : typeof key === 'string' ? key : undefined;
    // compared as digests: equal lengths for timingSafeEqual, and no timing hint of the token
    if (given === undefined || !timingSafeEqual(tokenDigest(given), want)) {
      throw new MinisandboxError('UNAUTHORIZED', 'missing or wrong token', {
        hint: 'send `Authorization: Bearer <token>` or `X-API-Key: <token>`; the token is in the file serve printed at start',
      });
    }
  });

  app.addHook('onResponse', async (req, reply) => {
    log(
      JSON.stringify({
        time: new Date().toISOString(),
        req: req.id,
        method: req.method,
        url: req.url,
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 100) / 100,
      }),
    );
  });

  app.setErrorHandler(async (err: unknown, _req: FastifyRequest, reply: FastifyReply) => {
    let code: ErrorCode;
    let status: number;
    let message = err instanceof Error ? err.message : String(err);
    let hint: string | undefined;
    let field: string | undefined;
    if (err instanceof MinisandboxError) {
      code = err.code;
      // runtime failures (a sandbox that would not start, a registry that failed) are the server's side
      status = STATUS[code] ?? 500;
      hint = err.hint;
      if (err instanceof FieldError && err.field !== '') field = err.field;
      if (err instanceof CapacityError) void reply.header('retry-after', String(err.retryAfterS));
    } else {
      // fastify's own: body parsing and limits
      const sc = typeof err === 'object' && err !== null && 'statusCode' in err && typeof err.statusCode === 'number' ? err.statusCode : 500;
      if (sc === 413) [code, status, hint] = ['BODY_TOO_LARGE', 413, 'send less; files go with PUT /v1/sandboxes/:id/files as application/octet-stream'];
      else if (sc === 415) [code, status, hint] = ['INVALID_INPUT', 415, 'send JSON (application/json), or file bytes as application/octet-stream'];
      else if (sc >= 400 && sc < 500) [code, status, hint] = ['MALFORMED_BODY', 400, 'the body must be valid JSON'];
      else {
        [code, status, hint] = ['INTERNAL', 500, 'a bug in the server: report it with the request log line'];
        message = `internal error: ${message}`;
      }
    }
    mgr.metrics.error(code);
    return reply.code(status).send({ error: { code, message, ...(hint === undefined ? {} : { hint }), ...(field === undefined ? {} : { field }) } });
  });

  app.setNotFoundHandler(async (req, reply) => {
    mgr.metrics.error('NOT_FOUND');
    return reply.code(404).send({
      error: {
        code: 'NOT_FOUND',
        message: `no route ${req.method} ${req.url.split('?')[0]}`,
        hint: 'the native API is under /v1 (see README.md, section serve)',
      },
    });
  });

  app.get('/v1/health', async () => ({ ok: true }));
  app.get('/v1/capacity', async () => ({ live: mgr.live, max: mgr.max }));
  app.get('/metrics', async (_req, reply) => reply.type('text/plain; version=0.0.4').send(mgr.metrics.render(mgr.live, mgr.max)));

  app.post('/v1/sandboxes', async (req, reply) => {
    const b = parse(CreateSandboxBodySchema, req.body, 'body');
    const limits: NonNullable<OpenOptions['limits']> = {};
    if (b.limits?.cpus !== undefined) limits.cpus = b.limits.cpus;
    if (b.limits?.memory !== undefined) limits.memoryBytes = b.limits.memory;
    if (b.limits?.pids !== undefined) limits.pids = b.limits.pids;
    if (b.limits?.disk !== undefined) limits.diskBytes = b.limits.disk;
    const config: NonNullable<OpenOptions['config']> = {};
    if (b.env !== undefined) config.env = b.env;
    if (b.workdir !== undefined) config.workdir = b.workdir;
    const e = await mgr.create(
      b.ref,
      {
        limits,
        config,
        network: b.network ?? 'none',
        signal: disconnectSignal(reply),
        warn: (message) => log(JSON.stringify({ time: new Date().toISOString(), req: req.id, event: 'warning', message })),
      },
      b.ttl,
    );
    return reply.code(201).send(mgr.info(e));
  });

  app.get('/v1/sandboxes', async () => ({ sandboxes: mgr.list() }));
  app.get('/v1/sandboxes/:id', async (req) => mgr.info(mgr.get(parse(IdParamsSchema, req.params, 'path').id)));
  app.delete('/v1/sandboxes/:id', async (req, reply) => {
    await mgr.destroy(parse(IdParamsSchema, req.params, 'path').id);
    return reply.code(204).send();
  });

  app.post('/v1/sandboxes/:id/exec', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(ExecBodySchema, req.body, 'body');
    const signal = disconnectSignal(reply);
    const o = await mgr.use(id, (e) =>
      e.sb.exec(b.argv ?? b.command!, {
        signal,
        ...(b.cwd === undefined ? {} : { workdir: b.cwd }),
        ...(b.env === undefined ? {} : { env: b.env }),
        ...(b.timeout === undefined ? {} : { timeoutMs: b.timeout }),
        ...(b.max_output === undefined ? {} : { maxOutputBytes: b.max_output }),
      }),
    );
    mgr.metrics.execLatency(o.durationMs / 1000);
    return outcomeBody(o);
  });

  app.post('/v1/sandboxes/:id/sessions', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(CreateSessionBodySchema, req.body, 'body');
    return mgr.use(id, async (e) => {
      const s = e.sb.newSession();
      for (const cmd of b.startup) {
        const o = await s.run(cmd);
        if (o.status !== 'ok' || o.exitCode !== 0) {
          s.close();
          return reply.code(422).send({
            error: {
              code: 'INVALID_INPUT',
              message: `startup command failed (${o.status}, exit ${o.exitCode}): ${cmd}`,
              hint: 'fix the startup command; its output is in `outcome`',
            },
            outcome: outcomeBody(o),
          });
        }
      }
      const sid = mgr.newSessionId();
      e.sessions.set(sid, s);
      return reply.code(201).send({ session: sid });
    });
  });

  const sessionOf = (sessions: Map<string, Session>, sid: string, id: string): Session => {
    const s = sessions.get(sid);
    if (s === undefined)
      throw new MinisandboxError('NOT_FOUND', `session ${sid} not found in sandbox ${id}`, { hint: 'create one with POST /v1/sandboxes/:id/sessions' });
    return s;
  };

  app.post('/v1/sandboxes/:id/sessions/:sid/run', async (req, reply) => {
    const { id, sid } = parse(SessionParamsSchema, req.params, 'path');
    const b = parse(SessionRunBodySchema, req.body, 'body');
    const signal = disconnectSignal(reply);
    const o = await mgr.use(id, (e) =>
      sessionOf(e.sessions, sid, id).run(b.command, {
        signal,
        ...(b.timeout === undefined ? {} : { timeoutMs: b.timeout }),
        ...(b.max_output === undefined ? {} : { maxOutputBytes: b.max_output }),
      }),
    );
    mgr.metrics.execLatency(o.durationMs / 1000);
    return outcomeBody(o);
  });

  // Ctrl-C for the session's running command (if any): it ends with its own status, the shell stays.
  app.post('/v1/sandboxes/:id/sessions/:sid/interrupt', async (req, reply) => {
    const { id, sid } = parse(SessionParamsSchema, req.params, 'path');
    await mgr.use(id, (e) => sessionOf(e.sessions, sid, id).interruptCurrent('SIGINT'));
    return reply.code(204).send();
  });

  app.delete('/v1/sandboxes/:id/sessions/:sid', async (req, reply) => {
    const { id, sid } = parse(SessionParamsSchema, req.params, 'path');
    await mgr.use(id, async (e) => {
      sessionOf(e.sessions, sid, id).close();
      e.sessions.delete(sid);
    });
    return reply.code(204).send();
  });

  app.get('/v1/sandboxes/:id/files', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const q = parse(FileQuerySchema, req.query, 'query');
    // read and stat inside the sandbox: a planted symlink resolves in the sandbox's own root
    const [data, mode] = await mgr.use(id, async (e) => {
      const bytes = await e.sb.readFile(q.path, { maxBytes: fileLimit });
      const st = await e.sb.exec(['/bin/sh', '-c', 'exec stat -L -c %a -- "$1"', 'msb-stat', q.path], { timeoutMs: 30_000 });
      return [bytes, st.status === 'ok' && st.exitCode === 0 ? st.stdout.trim() : undefined] as const;
    });
    if (mode !== undefined) void reply.header('x-file-mode', mode);
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

  app.post('/v1/sandboxes/:id/fork', async (req) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(ForkBodySchema, req.body, 'body');
    return { children: await mgr.fork(id, b.count) };
  });

  return app;
}
