/**
 * The HTTP face of a SandboxManager: fastify routes for the native API (`/v1`), token auth on every
 * request (before any body is read), a JSON-lines request log, `/metrics`, and one error shape,
 * `{"error": {"code", "message", "hint", "field"?}}`, whose code is one of errors.ts' ErrorCode.
 */
import type { AllowedMountDir } from './mount-policy.js';
import { createHash, timingSafeEqual } from 'node:crypto';
import { resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { InvalidFieldError, MinisandboxError, type ErrorCode } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from '../store/paths.js';
import { dropHeaders, FieldError, parse, type RouteContext } from './http.js';
import { RetryLaterError, type SandboxManager } from './manager.js';
import { openApiRoutes, recordRoutes } from './openapi.js';
import { budgetJsonBodies } from './request-memory.js';
import { execRoutes } from './routes-exec.js';
import { fileRoutes } from './routes-files.js';
import { type EvaluateConfig, evaluateRoutes } from './routes-evaluate.js';
import { jobRoutes } from './routes-jobs.js';
import { NodeHolds } from './holds.js';
import { NodePrefetch, type PrefetchStatus } from './node-prefetch.js';
import { nodeRoutes } from './routes-node.js';
import { HealthQuerySchema } from './schemas.js';
import { sandboxRoutes } from './routes-sandboxes.js';
import { snapshotRoutes } from './routes-snapshots.js';
import { tarRoutes } from './routes-tar.js';
import { swerexRoutes } from './swerex-routes.js';

export interface AppOptions {
  token: string;
  /** Largest JSON body, in bytes (413 beyond). */
  bodyLimit?: number;
  /** Largest file written with PUT /files, in bytes (413 beyond); also the largest file read. */
  fileLimit?: number;
  /** Where the JSON-lines request log goes (one line per request); default stderr. */
  log?: (line: string) => void;
  /** The node's registry and store, for the routes that pull, snapshot or grade. */
  reg?: Registry;
  store?: StorePaths;
  /** Datasets and reports dir of POST /v1/evaluate (without: every dataset is unknown, reports go to ./logs/run_evaluation). */
  evaluate?: EvaluateConfig;
  /** Host dirs creates may mount from (serve --allow-mount); none when absent. */
  allowMounts?: readonly AllowedMountDir[];
  /** The node's background prefetch (made here over reg and store where not given). */
  prefetch?: NodePrefetch;
  /** Whether /v1/health says ready (false while a start-up prefetch runs, with --ready-after-prefetch); default always. */
  ready?: () => boolean;
  /** What /v1/health answers as the version. */
  version?: string;
}

const STATUS: Partial<Record<ErrorCode, number>> = {
  UNAUTHORIZED: 401,
  MOUNT_NOT_ALLOWED: 403,
  NOT_FOUND: 404,
  INVALID_INPUT: 422,
  UNSAFE_PATH: 422,
  DIFF_FAILED: 422,
  CAPACITY: 429,
  SNAPSHOT_IN_USE: 409,
  // the sandbox could not be held still this time: a retry may succeed
  SANDBOX_FREEZE: 503,
  BODY_TOO_LARGE: 413,
  MALFORMED_BODY: 400,
  MALFORMED_REQUEST: 400,
  SANDBOX_DESTROYED: 410,
  NODE_RESTARTED: 410,
  SESSION_CLOSED: 410,
  ABORTED: 499,
  SANDBOX_FILE: 404,
  NOT_CONFIGURED: 501,
};

/** The prefetch's progress in /v1/health: its counts, not its list of failures. */
function pick(s: PrefetchStatus): Pick<PrefetchStatus, 'state' | 'total' | 'done'> & { failed: number } {
  return { state: s.state, total: s.total, done: s.done, failed: s.failed.length };
}

function tokenDigest(t: string): Buffer {
  return createHash('sha256').update(t).digest();
}

/** A fastify error's own code (FST_ERR_...), if it has one. */
function fastifyCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

export interface ErrorBody {
  error: { code: ErrorCode; message: string; hint?: string; field?: string };
}

/** The status and body the server answers `err` with: every error, ours or fastify's, in one shape. */
export function errorAnswer(err: unknown): { status: number; body: ErrorBody } {
  let message = err instanceof Error ? err.message : String(err);
  const answer = (status: number, code: ErrorCode, hint: string | undefined, field?: string) => ({
    status,
    body: { error: { code, message, ...(hint === undefined ? {} : { hint }), ...(field === undefined ? {} : { field }) } },
  });
  if (err instanceof MinisandboxError) {
    // runtime failures (a sandbox that would not start, a registry that failed) are the server's side
    return answer(STATUS[err.code] ?? 500, err.code, err.hint, err instanceof InvalidFieldError && err.field !== '' ? err.field : undefined);
  }
  // fastify's own: body parsing and limits, URLs
  const sc = typeof err === 'object' && err !== null && 'statusCode' in err && typeof err.statusCode === 'number' ? err.statusCode : 500;
  if (sc === 413) return answer(413, 'BODY_TOO_LARGE', 'send less; files go with PUT /v1/sandboxes/:id/files as application/octet-stream');
  if (sc === 415) return answer(415, 'INVALID_INPUT', 'send JSON (application/json), or file bytes as application/octet-stream');
  if (fastifyCode(err) === 'FST_ERR_BAD_URL') return answer(400, 'MALFORMED_REQUEST', 'percent-encode the path and query (e.g. encodeURIComponent)');
  if (fastifyCode(err) === 'FST_ERR_MAX_PARAM_LENGTH') return answer(414, 'INVALID_INPUT', 'a path part (an id) is at most 100 characters');
  if (sc >= 400 && sc < 500) return answer(400, 'MALFORMED_BODY', 'the body must be valid JSON');
  message = `internal error: ${message}`;
  return answer(500, 'INTERNAL', 'a bug in the server: report it with the request log line');
}

/** Fastify's clientErrorHandler: a request that is not HTTP gets the server's shape, and the connection ends. */
function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, reason, message] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', 'the request did not arrive in time']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'the request headers are too large']
        : [400, 'Bad Request', `the request is not valid HTTP (${err.code ?? 'unparsable'})`];
  const body = JSON.stringify({
    error: { code: 'MALFORMED_REQUEST', message, hint: 'send HTTP/1.1 with printable header values (names go in JSON bodies or percent-encoded queries)' },
  });
  if (socket.writable) {
    const head = `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}`;
    socket.write(`${head}\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy();
}

export function buildApp(mgr: SandboxManager, opts: AppOptions): FastifyInstance {
  const want = tokenDigest(opts.token);
  const log = opts.log ?? ((l: string) => void process.stderr.write(`${l}\n`));
  const fileLimit = opts.fileLimit ?? 256 << 20;
  const app = Fastify({
    logger: false,
    bodyLimit: opts.bodyLimit ?? 8 << 20,
    // what is not HTTP at all (a bad request line or header, headers too large, too slow) is
    // answered here, before any route or hook: in the server's shape too
    clientErrorHandler: answerClientError,
    // a URL that cannot be decoded, or a path part too long, is refused before routing: same shape
    frameworkErrors: (err, _req, reply: FastifyReply) => {
      const { status, body } = errorAnswer(err);
      mgr.metrics.error(body.error.code);
      void reply.code(status).send(body);
    },
  });
  recordRoutes(app);

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

  /**
   * The token a kept-alive connection already proved it has: its next requests skip the digest. A
   * plain compare, but only against what that same connection sent before, so it hints nothing
   * about the token to a connection that has not sent it.
   */
  const proven = new WeakMap<object, string>();
  app.addHook('onRequest', async (req) => {
    // Health alone is open: kubelet's probes send no secret, and it says nothing a caller could
    // use (node name, start time, version, readiness; no sandbox, no ref).
    if (req.method === 'GET' && req.routeOptions.url === '/v1/health') return;
    const auth = req.headers.authorization;
    const key = req.headers['x-api-key'];
    const given = typeof auth === 'string' && auth.startsWith('Bearer ') ? auth.slice(7) : typeof key === 'string' ? key : undefined;
    const conn = req.raw.socket;
    if (given !== undefined && proven.get(conn) === given) return;
    // compared as digests: equal lengths for timingSafeEqual, and no timing hint of the token
    if (given === undefined || !timingSafeEqual(tokenDigest(given), want)) {
      throw new MinisandboxError('UNAUTHORIZED', 'missing or wrong token', {
        hint: 'send `Authorization: Bearer <token>` or `X-API-Key: <token>`; the token is in the file serve printed at start',
      });
    }
    proven.set(conn, given);
  });

  // JSON bodies are held whole while parsed: they take from the memory budget (429 past it)
  budgetJsonBodies(app, mgr.memory);

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
    const { status, body } = errorAnswer(err);
    dropHeaders(reply);
    if (err instanceof RetryLaterError) void reply.header('retry-after', String(err.retryAfterS));
    mgr.metrics.error(body.error.code);
    return reply.code(status).send(body);
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

  const node = mgr.opts.node;
  const startedAt = new Date(node?.startedAt ?? Date.now()).toISOString();
  const prefetch = opts.prefetch ?? (opts.reg !== undefined && opts.store !== undefined ? new NodePrefetch(opts.reg, opts.store) : undefined);
  app.get('/v1/health', async (req, reply) => {
    const q = parse(HealthQuerySchema, req.query, 'query');
    const warming = opts.ready?.() === false;
    const body = {
      ok: true,
      node: node?.name ?? null,
      started_at: startedAt,
      version: opts.version ?? 'unknown',
      ready: !warming,
      ...(prefetch === undefined ? {} : { prefetch: pick(prefetch.status()) }),
    };
    // a readiness probe (`?ready=1`) fails while the node warms; liveness (no query) never does
    return reply.code(q.ready === true && warming ? 503 : 200).send(body);
  });
  app.get('/metrics', async (_req, reply) => reply.type('text/plain; version=0.0.4').send(mgr.metrics.render(mgr.live, mgr.max, mgr.memory)));

  const ctx: RouteContext = {
    mgr,
    log,
    fileLimit,
    ...(opts.reg === undefined ? {} : { reg: opts.reg }),
    ...(opts.store === undefined ? {} : { store: opts.store }),
    ...(opts.allowMounts === undefined ? {} : { allowMounts: opts.allowMounts }),
    ...(prefetch === undefined || opts.reg === undefined || opts.store === undefined ? {} : { prefetch, holds: new NodeHolds(opts.reg, opts.store) }),
  };
  sandboxRoutes(app, ctx);
  execRoutes(app, ctx);
  fileRoutes(app, ctx);
  snapshotRoutes(app, ctx);
  jobRoutes(app, ctx);
  tarRoutes(app, ctx);
  nodeRoutes(app, ctx);
  evaluateRoutes(app, ctx, opts.evaluate ?? { datasets: new Map(), reportsDir: resolve('logs/run_evaluation') });
  openApiRoutes(app, ctx);
  void app.register(swerexRoutes, { prefix: '/swerex/:key', ctx });

  return app;
}
