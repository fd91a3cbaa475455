/**
 * Commands: one-shot exec, and persistent sessions (create with startup commands, run, interrupt, close).
 */
import type { FastifyInstance } from 'fastify';
import { MinisandboxError } from '../errors.js';
import type { Session } from '../sandbox/session.js';
import { type RouteContext, disconnectSignal, outcomeBody, parse } from './http.js';
import { jobsOf } from './jobs.js';
import { jsonReply } from './json-reply.js';
import { outputCap, outputGrant, replyAccount } from './request-memory.js';
import { CreateSessionBodySchema, ExecBodySchema, ExecQuerySchema, IdParamsSchema, SessionParamsSchema, SessionRunBodySchema } from './schemas.js';

export function execRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const { mgr } = ctx;
  app.post('/v1/sandboxes/:id/exec', async (req, reply) => {
    const { id } = parse(IdParamsSchema, req.params, 'path');
    const b = parse(ExecBodySchema, req.body, 'body');
    const q = parse(ExecQuerySchema, req.query, 'query');
    const opts = {
      ...(b.cwd === undefined ? {} : { workdir: b.cwd }),
      ...(b.env === undefined ? {} : { env: b.env }),
      ...(b.timeout === undefined ? {} : { timeoutMs: b.timeout }),
      maxOutputBytes: outputCap(b.max_output, mgr.maxOutputBytes),
    };
    if (q.async === true) {
      // the job outlives this request: its own signal, not the client's connection, can kill it
      const e = mgr.get(id);
      // refused now, with a 422 naming the field, rather than as a failed job: nothing has started
      e.sb.checkExec(b.argv ?? b.command!, opts);
      // jobs are for long commands: without a timeout of its own, one may run as long as its sandbox lives
      const timeoutMs = b.timeout ?? Math.max(1, e.expiresAt - Date.now());
      // its output is the budget's while it runs; once it ends, the job table's (--job-output-budget)
      const account = mgr.memory.account();
      const job = jobsOf(e, mgr.jobLimits).start(
        e,
        timeoutMs,
        (signal) => e.sb.exec(b.argv ?? b.command!, { ...opts, timeoutMs, signal, outputBudget: outputGrant(account) }),
        (o) => {
          account.release();
          mgr.metrics.execLatency(o.durationMs / 1000);
        },
      );
      return reply.code(202).send({ job: job.id, status: 'running' });
    }
    const signal = disconnectSignal(reply);
    const outputBudget = outputGrant(replyAccount(mgr.memory, reply));
    const o = await mgr.use(id, (e) => e.sb.exec(b.argv ?? b.command!, { ...opts, signal, outputBudget }));
    mgr.metrics.execLatency(o.durationMs / 1000);
    return jsonReply(reply, outcomeBody(o));
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
    const maxOutputBytes = outputCap(b.max_output, mgr.maxOutputBytes);
    const signal = disconnectSignal(reply);
    const outputBudget = outputGrant(replyAccount(mgr.memory, reply));
    const o = await mgr.use(id, (e) =>
      sessionOf(e.sessions, sid, id).run(b.command, {
        signal,
        outputBudget,
        maxOutputBytes,
        ...(b.timeout === undefined ? {} : { timeoutMs: b.timeout }),
      }),
    );
    mgr.metrics.execLatency(o.durationMs / 1000);
    return jsonReply(reply, outcomeBody(o));
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
}
