/**
 * Typed errors. Every error a user can meet carries a stable `code` (for scripts and `--json`)
 * and a `hint` that says what to do next.
 */

/**
 * Every code an error of minisandbox may carry: the one list scripts can match against (the CLI's
 * `--json` errors, `err.code` in the library). A plain object, not a zod enum, so that importing
 * errors costs nothing at start-up (the CLI loads it for every command). The constructor takes
 * only these, so a new code is added here or the build fails.
 */
export const ErrorCode = {
  /** Usage of the CLI: a missing argument, conflicting options. */
  USAGE: 'USAGE',
  /** A manifest, recipe, dataset row, option value or other input failed validation. */
  INVALID_INPUT: 'INVALID_INPUT',
  NOT_FOUND: 'NOT_FOUND',
  /** A store another user owns is open to others: refused rather than used or changed. */
  STORE_NOT_PRIVATE: 'STORE_NOT_PRIVATE',
  UNSAFE_PATH: 'UNSAFE_PATH',
  DIGEST_MISMATCH: 'DIGEST_MISMATCH',
  HOST_CAPABILITY: 'HOST_CAPABILITY',
  /** The caller's AbortSignal fired. */
  ABORTED: 'ABORTED',
  SANDBOX_START: 'SANDBOX_START',
  /** Every per-sandbox id range of the subordinate pool is taken. */
  ID_RANGES_EXHAUSTED: 'ID_RANGES_EXHAUSTED',
  SANDBOX_DESTROYED: 'SANDBOX_DESTROYED',
  SANDBOX_FILE: 'SANDBOX_FILE',
  /** The sandbox's processes could not all be held still (for a snapshot or fork): they kept multiplying, or one would not stop. */
  SANDBOX_FREEZE: 'SANDBOX_FREEZE',
  SESSION_CLOSED: 'SESSION_CLOSED',
  DIFF_FAILED: 'DIFF_FAILED',
  GIT_FAILED: 'GIT_FAILED',
  TRUNCATED_BODY: 'TRUNCATED_BODY',
  REMOTE_STORE: 'REMOTE_STORE',
  REF_CONTENDED: 'REF_CONTENDED',
  BUILD_FAILED: 'BUILD_FAILED',
  BUILD_CANCELLED: 'BUILD_CANCELLED',
  FS_METADATA: 'FS_METADATA',
  CAPTURE_IO: 'CAPTURE_IO',
  CAPTURE_HASH: 'CAPTURE_HASH',
  CAPTURE_XATTR_SORT: 'CAPTURE_XATTR_SORT',
  CORRUPT_PACK: 'CORRUPT_PACK',
  SOURCE_CHANGED: 'SOURCE_CHANGED',
  PACK_LAYOUT: 'PACK_LAYOUT',
  PACK_WRITER_CLOSED: 'PACK_WRITER_CLOSED',
  PACK_WRITER_BUSY: 'PACK_WRITER_BUSY',
  COMPRESS_FAILED: 'COMPRESS_FAILED',
  /** A local write failed for its disk: full (ENOSPC), over quota (EDQUOT) or failing (EIO); the message names the path. */
  LOCAL_DISK: 'LOCAL_DISK',
  /** A container registry wants credentials it was not given (or refused them). */
  AUTH_REQUIRED: 'AUTH_REQUIRED',
  /** A container registry answered with an error. */
  REGISTRY_ERROR: 'REGISTRY_ERROR',
  /** A container registry could not be reached (or stopped answering) after retries. */
  REGISTRY_UNREACHABLE: 'REGISTRY_UNREACHABLE',
  /** `serve`: the request had no token, or a wrong one. */
  UNAUTHORIZED: 'UNAUTHORIZED',
  /** `serve`: the server already holds its maximum of sandboxes (HTTP 429). */
  CAPACITY: 'CAPACITY',
  /** A snapshot still used by a live sandbox (delete refused). */
  SNAPSHOT_IN_USE: 'SNAPSHOT_IN_USE',
  /**
   * `serve`: the sandbox was this node's, made before the server restarted, and was lost with the
   * process that held it (HTTP 410). Clients of a pool raise it as a lost node.
   */
  NODE_RESTARTED: 'NODE_RESTARTED',
  /** `serve`: the request body is larger than the server accepts (HTTP 413). */
  BODY_TOO_LARGE: 'BODY_TOO_LARGE',
  /** `serve`: the request body is not valid JSON (HTTP 400). */
  MALFORMED_BODY: 'MALFORMED_BODY',
  /** `serve`: the request is not valid HTTP, or its URL cannot be decoded (HTTP 400; 431 headers too large, 408 too slow). */
  MALFORMED_REQUEST: 'MALFORMED_REQUEST',
  /** `serve`: the route needs what this server was not given, e.g. a store and registry (HTTP 501). */
  NOT_CONFIGURED: 'NOT_CONFIGURED',
  /**
   * `serve`, SWE-ReX face: an exception of SWE-ReX's runtime (a command timed out, a session that does
   * not exist, a missing file), answered as HTTP 511 with its Python class path for the client to raise.
   */
  SWEREX_EXCEPTION: 'SWEREX_EXCEPTION',
  /** `serve`: a create asked for a host path the operator did not allow (--allow-mount), or rw where only ro is (HTTP 403). */
  MOUNT_NOT_ALLOWED: 'MOUNT_NOT_ALLOWED',
  /** The client of `serve` (src/client): the server could not be reached, or the connection broke mid-request. */
  TRANSPORT: 'TRANSPORT',
  /**
   * The client of `serve`: the node that holds the sandbox is gone (it stopped answering, or restarted),
   * and the sandbox's work with it. A trainer drops such an episode rather than score it.
   */
  NODE_LOST: 'NODE_LOST',
  /** `serve`: an error the server did not expect (HTTP 500): a bug; the message says where. */
  INTERNAL: 'INTERNAL',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Whether `s` is one of the codes above (for readers of `--json` errors). */
export function isErrorCode(s: unknown): s is ErrorCode {
  return typeof s === 'string' && Object.hasOwn(ErrorCode, s);
}

export class MinisandboxError extends Error {
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  constructor(code: ErrorCode, message: string, opts: { hint?: string; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'MinisandboxError';
    this.code = code;
    this.hint = opts.hint;
  }
}

/** Content did not match the digest that names it: corrupt or hostile registry/store data. */
export class DigestMismatchError extends MinisandboxError {
  constructor(what: string, expected: string, actual: string) {
    super('DIGEST_MISMATCH', `${what}: expected ${expected}, got ${actual}`, {
      hint: 'the registry or store holds corrupt data; run `minisandbox verify` and re-push the affected content',
    });
  }
}

/** A blob, ref or object that should exist does not. */
export class NotFoundError extends MinisandboxError {
  constructor(what: string, hint?: string) {
    super('NOT_FOUND', `${what} not found`, hint === undefined ? {} : { hint });
  }
}

/** A manifest, recipe, dataset row or other input failed validation. */
export class InvalidInputError extends MinisandboxError {
  constructor(message: string, hint?: string) {
    super('INVALID_INPUT', message, hint === undefined ? {} : { hint });
  }
}

/**
 * Input that failed validation in one named field: a request's `argv`, `env.NAME`, `command`
 * (dotted, as the server's 422 names it in `error.field`).
 */
export class InvalidFieldError extends InvalidInputError {
  constructor(
    readonly field: string,
    message: string,
    hint?: string,
  ) {
    super(message, hint);
  }
}

/** A manifest entry would escape its layer root (absolute path, `..`, through a symlink, ...). */
export class UnsafePathError extends MinisandboxError {
  constructor(path: string, why: string) {
    super('UNSAFE_PATH', `unsafe path ${JSON.stringify(path)}: ${why}`, {
      hint: 'the layer is malformed or hostile; it was rejected before anything was laid out',
    });
  }
}

/** The host lacks something the operation needs (user namespaces, uidmap, bubblewrap, ...). */
export class HostCapabilityError extends MinisandboxError {
  constructor(message: string, hint: string) {
    super('HOST_CAPABILITY', message, { hint });
  }
}

/** The caller's AbortSignal fired before the operation finished (nothing is left running). */
export class AbortedError extends MinisandboxError {
  constructor(what: string, reason?: unknown) {
    super('ABORTED', `${what}: aborted${reason instanceof Error ? ` (${reason.message})` : ''}`, {
      hint: 'the caller cancelled it; run it again to finish',
      cause: reason,
    });
  }
}

/** Throws AbortedError if `signal` has fired: for the points between the steps of a long call. */
export function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted) throw new AbortedError(what, signal.reason);
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
