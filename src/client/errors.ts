/**
 * The errors of the client of `serve`: one class per kind of answer, chosen by the server's error
 * `code` (stable across releases) before its HTTP status, so a caller can catch
 * `RemoteNotFoundError` whether the sandbox, the session or the file was missing. Every one is a
 * `MinisandboxError` with the server's code and hint. A node that is gone is `NodeLostError`
 * (code NODE_LOST), a `TransportError`: the sandbox's work is lost, not failed.
 */
import { type ErrorCode, isErrorCode, MinisandboxError } from '../errors.js';

export interface RemoteErrorInit {
  status: number;
  /** The server's `error.code`, as it said it (a newer server may say a code this client lacks). */
  serverCode: string;
  message: string;
  hint?: string | undefined;
  field?: string | undefined;
  retryAfterS?: number | undefined;
}

/** An error the server answered with `{error: {code, message, hint, field?}}` (or a bare status). */
export class RemoteError extends MinisandboxError {
  readonly status: number;
  readonly serverCode: string;
  /** The request field that failed its schema (dotted path, e.g. `limits.memory`). */
  readonly field: string | undefined;
  /** A 429's Retry-After, in seconds. */
  readonly retryAfterS: number | undefined;
  constructor(init: RemoteErrorInit) {
    super(isErrorCode(init.serverCode) ? init.serverCode : 'INTERNAL', init.message, init.hint === undefined ? {} : { hint: init.hint });
    this.name = new.target.name;
    this.status = init.status;
    this.serverCode = init.serverCode;
    this.field = init.field;
    this.retryAfterS = init.retryAfterS;
  }
}

/** 404: no such sandbox, session, job, snapshot, ref, file or route. */
export class RemoteNotFoundError extends RemoteError {
  /** True when the server has no such route (an older server), not a missing object. */
  get missingRoute(): boolean {
    return this.message.startsWith('no route ');
  }
}
/** 422 (or 415): a field failed its schema; `field` names it. */
export class RemoteInvalidInputError extends RemoteError {}
/** 400: the body was not JSON. */
export class MalformedBodyError extends RemoteError {}
/** 401: a missing or wrong token. */
export class UnauthorizedError extends RemoteError {}
/** 413: a body or file beyond the server's limit. */
export class BodyTooLargeError extends RemoteError {}
/** 429: the server holds its maximum of sandboxes (or the sandbox its maximum of jobs). */
export class CapacityError extends RemoteError {}
/** 410: the sandbox or session ended while the request ran. */
export class GoneError extends RemoteError {}
/** 5xx: the server's side failed. */
export class RemoteServerError extends RemoteError {}
/** 501: the server was not given what the route needs (a store, `--eval-dataset`). */
export class NotConfiguredError extends RemoteServerError {}

/** The server could not be reached, or the connection broke, or it did not answer in time. */
export class TransportError extends MinisandboxError {
  /** False when no connection was made: the server cannot have seen the request. */
  readonly sent: boolean;
  constructor(message: string, opts: { sent: boolean; cause?: unknown; hint?: string; code?: ErrorCode }) {
    super(opts.code ?? 'TRANSPORT', message, { ...(opts.hint === undefined ? {} : { hint: opts.hint }), cause: opts.cause });
    this.name = new.target.name;
    this.sent = opts.sent;
  }
}

export type NodeLostReason = 'unreachable' | 'unresponsive' | 'restarted';

/**
 * The node that holds the sandbox is gone: it refused or dropped the connection and did not answer
 * a health probe on a fresh one (`unreachable`), stopped answering the pool's probes while a call
 * was in flight (`unresponsive`), or restarted (`restarted`: 410 NODE_RESTARTED). `node` names it,
 * `sandboxId` the sandbox the call was on (undefined for a node-wide call).
 */
export class NodeLostError extends TransportError {
  readonly node: string | undefined;
  readonly sandboxId: string | undefined;
  readonly reason: NodeLostReason;
  constructor(message: string, opts: { node: string | undefined; sandboxId: string | undefined; reason: NodeLostReason; cause?: unknown; hint?: string }) {
    super(message, {
      sent: true,
      code: 'NODE_LOST',
      cause: opts.cause,
      hint: opts.hint ?? "the sandbox's work is gone with its node: drop the episode (do not score it) and start it again on the pool",
    });
    this.node = opts.node;
    this.sandboxId = opts.sandboxId;
    this.reason = opts.reason;
  }
}

/** The node a sandbox id names (`sb-<time36>-<hex>.<node>`), or undefined for an id without one. */
export function nodeOf(sandboxId: string): string | undefined {
  const dot = sandboxId.lastIndexOf('.');
  return dot > 0 && dot < sandboxId.length - 1 ? sandboxId.slice(dot + 1) : undefined;
}

const BY_CODE: Record<string, new (init: RemoteErrorInit) => RemoteError> = {
  UNAUTHORIZED: UnauthorizedError,
  NOT_FOUND: RemoteNotFoundError,
  SANDBOX_FILE: RemoteNotFoundError,
  INVALID_INPUT: RemoteInvalidInputError,
  UNSAFE_PATH: RemoteInvalidInputError,
  DIFF_FAILED: RemoteInvalidInputError,
  MALFORMED_BODY: MalformedBodyError,
  BODY_TOO_LARGE: BodyTooLargeError,
  CAPACITY: CapacityError,
  SANDBOX_DESTROYED: GoneError,
  SESSION_CLOSED: GoneError,
  NOT_CONFIGURED: NotConfiguredError,
};

const BY_STATUS: Record<number, new (init: RemoteErrorInit) => RemoteError> = {
  400: MalformedBodyError,
  401: UnauthorizedError,
  404: RemoteNotFoundError,
  410: GoneError,
  413: BodyTooLargeError,
  415: RemoteInvalidInputError,
  422: RemoteInvalidInputError,
  429: CapacityError,
};

/** The typed error of an answer with status >= 400 (its body parsed, if it was JSON). */
export function errorFromAnswer(status: number, body: unknown, retryAfter: string | null, text: string): MinisandboxError {
  const err = typeof body === 'object' && body !== null ? (body as { error?: unknown }).error : undefined;
  const e = typeof err === 'object' && err !== null ? (err as Record<string, unknown>) : undefined;
  const serverCode = typeof e?.code === 'string' ? e.code : status >= 500 ? 'INTERNAL' : `HTTP_${status}`;
  const message = typeof e?.message === 'string' ? e.message : text.slice(0, 500) || `HTTP ${status}`;
  const hint = typeof e?.hint === 'string' ? e.hint : undefined;
  if (serverCode === 'NODE_RESTARTED') {
    // "sandbox X was lost when node N restarted at T": the sandbox ended with its server's process
    const sandboxId = /sandbox (\S+) /.exec(message)?.[1];
    return new NodeLostError(message, { node: sandboxId === undefined ? undefined : nodeOf(sandboxId), sandboxId, reason: 'restarted', hint });
  }
  const ra = retryAfter === null ? undefined : Number(retryAfter);
  const cls = BY_CODE[serverCode] ?? BY_STATUS[status] ?? (status >= 500 ? RemoteServerError : RemoteError);
  return new cls({
    status,
    serverCode,
    message,
    hint,
    field: typeof e?.field === 'string' ? e.field : undefined,
    retryAfterS: ra !== undefined && Number.isFinite(ra) ? ra : undefined,
  });
}
