/**
 * What every route module shares: request parsing that names the failing field, the command
 * outcome's JSON shape, the abort signal of a client that went away, and the context routes get.
 */
import type { FastifyReply } from 'fastify';
import type { z } from 'zod';
import { InvalidFieldError } from '../errors.js';
import { unionCause } from '../recipe/structured.js';
import type { Registry } from '../registry/registry.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { StorePaths } from '../store/paths.js';
import type { NodeHolds } from './holds.js';
import type { SandboxManager } from './manager.js';
import type { AllowedMountDir } from './mount-policy.js';
import type { NodePrefetch } from './node-prefetch.js';

/** What a route module is given: the sandboxes, and the node's store and registry where it has them. */
export interface RouteContext {
  mgr: SandboxManager;
  /** Largest file written or read through the files routes, in bytes (413 beyond). */
  fileLimit: number;
  /** One JSON-lines log line (the request log's sink). */
  log: (line: string) => void;
  /** Absent in tests that serve sandboxes without a store (routes that need one answer 501). */
  reg?: Registry;
  store?: StorePaths;
  /** Host dirs creates may mount from (serve --allow-mount); none when absent. */
  allowMounts?: readonly AllowedMountDir[];
  /** The node's background prefetch and what its store holds (where it has a store). */
  prefetch?: NodePrefetch;
  holds?: NodeHolds;
}

/** A request field that failed its schema: answered 422 with the field's dotted path. */
export class FieldError extends InvalidFieldError {
  constructor(field: string, message: string, hint = 'see the API reference in README.md (section "Sandbox server")') {
    super(field, message, hint);
  }
}

/** A schema failure names the field: `body field limits.memory: a size: ...`. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = unionCause(r.error.issues[0]!);
  const field = issue.path.map(String).join('.');
  throw new FieldError(field, `${where}${field === '' ? '' : ` field ${field}`}: ${issue.message.replace(/^Invalid input: /, '')}`);
}

export function outcomeBody(o: CommandOutcome): Record<string, unknown> {
  return {
    stdout: o.stdout,
    stderr: o.stderr,
    exit_code: o.exitCode,
    outcome: o.status,
    signal: o.signal,
    stdout_truncated: o.stdoutTruncated,
    stderr_truncated: o.stderrTruncated,
    duration_ms: Math.round(o.durationMs * 1000) / 1000,
    // which bound cut the output: the request's max_output, or the server's memory budget
    ...(o.stdoutTruncated || o.stderrTruncated ? { truncated_by: o.budgetCut === true ? 'server_budget' : 'max_output' } : {}),
    ...(o.error === undefined ? {} : { error: o.error }),
  };
}

/**
 * Removes every header an answer had before it failed: an error answer describes none of them, and
 * one may be why it failed (an invalid value makes writing the headers throw, after which fastify
 * answers in its own shape, not the server's).
 */
export function dropHeaders(reply: FastifyReply): void {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
}

/** Aborts when the client goes away before its answer was sent: a disconnect kills the command. */
export function disconnectSignal(reply: FastifyReply): AbortSignal {
  const ac = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) ac.abort(new Error('the client disconnected'));
  });
  return ac.signal;
}
