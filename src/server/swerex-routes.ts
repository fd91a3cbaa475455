/**
 * The SWE-ReX compatible face: SWE-ReX's remote runtime protocol (its `server.py`) under
 * `/swerex/<key>/`, so an unmodified SWE-agent runs on minisandbox through `RemoteDeployment`
 * (host `http://node:7000/swerex/<key>`, port null). `<key>` is a sandbox id, or
 * `inst:<dataset>:<instance_id>`: the environment tagged `<dataset>/<instance_id>`, made on first
 * use (never by `is_alive`) and destroyed by `close`.
 *
 * SWE-ReX's exceptions are answered as its server does, HTTP 511 `{"swerexception": {message,
 * class_path, traceback, extra_info}}`; any other error goes to the server's own handler (JSON
 * `{"error": ...}` with its status). A fastify plugin with its own error handler and multipart
 * parser, registered under the `/swerex/:key` prefix.
 */
import { join } from 'node:path';
import multipart from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { errorMessage, InvalidInputError, MinisandboxError } from '../errors.js';
import { SANDBOX_ID_RE } from '../sandbox/sandbox-id.js';
import { disconnectSignal, dropHeaders, FieldError, parse, type RouteContext } from './http.js';
import type { Entry } from './manager.js';
import { executeCommand, readText, writeText } from './swerex-exec.js';
import { SwerexError } from './swerex-exceptions.js';
import { ReplayCache, requestIdOf } from './swerex-replay.js';
import {
  BashActionSchema,
  BashInterruptActionSchema,
  CloseBashSessionRequestSchema,
  CommandSchema,
  CreateBashSessionRequestSchema,
  ReadFileRequestSchema,
  UploadFieldsSchema,
  WriteFileRequestSchema,
} from './swerex-schemas.js';
import { closeAllBashSessions, closeBashSession, createBashSession, interruptBashSession, runBashAction, sessionNamed } from './swerex-session.js';
import { uploadFile, uploadZip } from './swerex-upload.js';
import { BodyTooLargeError, spoolBody, withSpoolDir } from './file-transfer.js';
import { jsonReply, stringChars } from './json-reply.js';
import { outputGrant, replyAccount } from './request-memory.js';
import type { BudgetAccount } from '../util/byte-budget.js';

export interface SwerexPluginOptions {
  ctx: RouteContext;
}

const INSTANCE_KEY = /^inst:([A-Za-z0-9._+@=-]+):([A-Za-z0-9_][A-Za-z0-9._+@=-]*)$/;

type Target = { kind: 'sandbox'; key: string; id: string } | { kind: 'inst'; key: string; ref: string };

export function targetOf(key: unknown): Target {
  if (typeof key === 'string') {
    const m = INSTANCE_KEY.exec(key);
    if (m !== null) return { kind: 'inst', key, ref: `${m[1]}/${m[2]}` };
    if (SANDBOX_ID_RE.test(key)) return { kind: 'sandbox', key, id: key };
  }
  throw new FieldError('key', `path field key: ${String(key)} is neither a sandbox id nor inst:<dataset>:<instance_id>`);
}

/** SWE-ReX's exceptions are answers, replayed to a retry; the server's own errors (full, sandbox gone) are not. */
const isSwerexAnswer = (e: unknown): boolean => e instanceof SwerexError;

export const swerexRoutes: FastifyPluginAsync<SwerexPluginOptions> = async (app, { ctx }) => {
  const { mgr, fileLimit, log } = ctx;
  // answers are kept by the characters of their strings (an exception's message holds the output it reports)
  const replay = new ReplayCache({ perKey: 64, keys: 4096 }, (o) =>
    o.ok ? stringChars(o.value) : o.error instanceof SwerexError ? o.error.message.length + stringChars(o.error.extraInfo) : 0,
  );
  await app.register(multipart, { limits: { fileSize: fileLimit, files: 1, fields: 8, fieldSize: 1 << 20 } });

  app.setErrorHandler(async (err: unknown, _req, reply) => {
    if (err instanceof SwerexError) {
      dropHeaders(reply);
      mgr.metrics.error(err.code);
      return reply.code(511).send({
        swerexception: {
          message: err.message,
          class_path: err.classPath,
          // SWE-ReX's client logs a non-empty traceback; there is no Python one to give
          traceback: '',
          extra_info: err.extraInfo,
        },
      });
    }
    throw err; // the server's own handler answers it (JSON `{"error": ...}` with its status)
  });

  /** The sandbox behind the key; an `inst:` key's is made on first use when `create`. */
  const sandboxOf = async (t: Target, create: boolean): Promise<Entry | undefined> => {
    if (t.kind === 'sandbox') return mgr.get(t.id);
    if (!create) return mgr.named(t.key);
    return mgr.namedOrCreate(t.key, async () => {
      try {
        return await createFor(t);
      } catch (e) {
        // a raw 404 would reach SWE-ReX's client as an HTTP error from a runtime it was told is alive
        if (e instanceof MinisandboxError && e.code === 'NOT_FOUND')
          throw new SwerexError(
            'swerex.exceptions.DeploymentStartupError',
            `no environment ${t.ref} for key ${t.key}: ${e.message}${e.hint === undefined ? '' : ` (${e.hint})`}`,
          );
        throw e;
      }
    });
  };

  const createFor = async (t: Target & { kind: 'inst' }): Promise<Entry> => {
    // no abort on disconnect: a client that gave up finds the sandbox made when it retries
    const e = await mgr.create(
      t.ref,
      { network: 'none', warn: (message) => log(JSON.stringify({ time: new Date().toISOString(), event: 'warning', message })) },
      undefined,
    );
    log(JSON.stringify({ time: new Date().toISOString(), event: 'swerex-created', key: t.key, sandbox: e.sb.id }));
    return e;
  };

  /**
   * A POST route that runs once per X-Request-ID. Without one, a client that disconnects gets its
   * command killed (`signal`); with one, the command runs on so that the retry gets its answer.
   * What the work holds in memory comes from the server's budget (`account`): until the answer
   * is sent, or, for work a retry may join, until the work ends (the replay cache bounds the
   * answers it keeps).
   */
  type Handler = (req: FastifyRequest, t: Target, signal: AbortSignal | undefined, account: BudgetAccount) => Promise<unknown>;
  const once = async (req: FastifyRequest, reply: FastifyReply, t: Target, handler: Handler): Promise<unknown> => {
    const rid = requestIdOf(req);
    if (rid === undefined) return jsonReply(reply, await handler(req, t, disconnectSignal(reply), replyAccount(mgr.memory, reply)));
    const account = mgr.memory.account();
    try {
      return jsonReply(reply, await replay.once(t.key, rid, () => handler(req, t, undefined, account), isSwerexAnswer));
    } finally {
      account.release();
    }
  };
  const post = (path: string, handler: Handler): void => {
    app.post(path, async (req: FastifyRequest, reply: FastifyReply) => once(req, reply, targetOf((req.params as { key?: unknown }).key), handler));
  };

  // GET: answers from the server's own tables, never touching a sandbox (SWE-ReX polls it, with a 0.15 s timeout)
  app.get('/is_alive', async (req) => {
    const t = targetOf((req.params as { key?: unknown }).key);
    if (t.kind === 'inst') return { is_alive: true, message: '' };
    try {
      mgr.get(t.id);
      return { is_alive: true, message: '' };
    } catch (e) {
      return { is_alive: false, message: errorMessage(e) };
    }
  });
  app.get('/', async () => ({ message: 'hello world' }));

  post('/create_session', async (req, t) => {
    const b = parse(CreateBashSessionRequestSchema, req.body, 'body');
    const e = (await sandboxOf(t, true))!;
    return mgr.use(e.sb.id, () => createBashSession(e.sb, b));
  });

  // a terminal session holds at most MAX_OUTPUT_BYTES characters of output (its own cap), outside the budget
  post('/run_in_session', async (req, t, signal) => {
    const body = req.body as { action_type?: unknown } | undefined;
    if (body?.action_type === 'bash_interrupt') {
      const a = parse(BashInterruptActionSchema, req.body, 'body');
      const e = await sandboxOf(t, false);
      const s = sessionNamed(e?.sb, a.session);
      return mgr.use(e!.sb.id, () => interruptBashSession(s, a));
    }
    const a = parse(BashActionSchema, req.body, 'body');
    const e = await sandboxOf(t, false);
    const s = sessionNamed(e?.sb, a.session);
    return mgr.use(e!.sb.id, async () => {
      const started = performance.now();
      const observation = await runBashAction(s, a, signal);
      mgr.metrics.execLatency((performance.now() - started) / 1000);
      return observation;
    });
  });

  post('/close_session', async (req, t) => {
    const b = parse(CloseBashSessionRequestSchema, req.body, 'body');
    const e = await sandboxOf(t, false);
    return closeBashSession(e?.sb, b.session);
  });

  post('/execute', async (req, t, signal, account) => {
    const c = parse(CommandSchema, req.body, 'body');
    const e = (await sandboxOf(t, true))!;
    return mgr.use(e.sb.id, async () => {
      const { response, outcome } = await executeCommand(e.sb, c, signal, outputGrant(account));
      mgr.metrics.execLatency(outcome.durationMs / 1000);
      return response;
    });
  });

  post('/read_file', async (req, t, signal, account) => {
    const r = parse(ReadFileRequestSchema, req.body, 'body');
    const e = (await sandboxOf(t, true))!;
    const mem = { limit: fileLimit, account, budget: mgr.memory, ...(signal === undefined ? {} : { signal }) };
    return { content: await mgr.use(e.sb.id, () => readText(e.sb, r.path, r.encoding, r.errors, mem)) };
  });

  post('/write_file', async (req, t) => {
    const w = parse(WriteFileRequestSchema, req.body, 'body');
    const e = (await sandboxOf(t, true))!;
    await mgr.use(e.sb.id, () => writeText(e.sb, w.path, w.content));
    return {};
  });

  // multipart: the file first (SWE-ReX's client sends it first), then target_path and unzip; the
  // file is spooled to the host as it arrives (counted by the multipart limit), never held whole
  app.post('/upload', async (req: FastifyRequest, reply: FastifyReply) => {
    const t = targetOf((req.params as { key?: unknown }).key);
    if (!req.isMultipart())
      throw new InvalidInputError('upload: the body must be multipart/form-data', 'send the fields file, target_path and unzip (true for a zipped directory)');
    if (Number(req.headers['content-length'] ?? 0) > fileLimit + (1 << 20)) throw new BodyTooLargeError(fileLimit);
    return withSpoolDir(ctx.store, 'upload-', async (dir) => {
      const spooled = join(dir, 'file');
      let got = false;
      const fields: Record<string, string> = {};
      for await (const part of req.parts()) {
        if (part.type !== 'file') fields[part.fieldname] = String(part.value);
        else if (part.fieldname !== 'file' || got) part.file.resume();
        else {
          await spoolBody(part.file, fileLimit, spooled);
          if (part.file.truncated) throw new BodyTooLargeError(fileLimit);
          got = true;
        }
      }
      if (!got) throw new FieldError('file', 'body field file: missing (the bytes to upload)');
      const f = parse(UploadFieldsSchema, fields, 'body');
      return once(req, reply, t, async (_req, target, signal) => {
        const e = (await sandboxOf(target, true))!;
        await mgr.use(e.sb.id, () => (f.unzip ? uploadZip(e.sb, spooled, f.target_path, fileLimit, signal) : uploadFile(e.sb, spooled, f.target_path, signal)));
        return {};
      });
    });
  });

  post('/close', async (_req, t) => {
    if (t.kind === 'inst') await mgr.destroyNamed(t.key);
    else {
      // a sandbox made through /v1 is its creator's to delete: close ends only the SWE-ReX sessions in it
      const e = await sandboxOf(t, false).catch(() => undefined);
      if (e !== undefined) closeAllBashSessions(e.sb);
    }
    return {};
  });
};
