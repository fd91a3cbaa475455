/**
 * Retries with exponential backoff and full jitter, and the classification of which failures are
 * worth retrying. Backends wrap every remote call in `withRetry`; the SDK's own retry is switched
 * off so that one policy (and one place to test it) covers SDK errors, socket errors and bodies
 * that ended early.
 */
import { MinisandboxError } from '../errors.js';

export interface RetryPolicy {
  /** Total attempts, the first included. */
  attempts: number;
  /** Backoff before retry n (1-based) is uniform in [0, min(maxDelayMs, baseDelayMs * 2^(n-1))). */
  baseDelayMs: number;
  maxDelayMs: number;
  /**
   * Attempts in a row that got no answer within the idle timeout after which a request fails at
   * once: a server that is stopped (SIGSTOP, a hung host) keeps connections open and answers
   * nothing, and 8 attempts of a minute each looked like a hang with no error.
   */
  unansweredAttempts?: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { attempts: 8, baseDelayMs: 100, maxDelayMs: 10_000, unansweredAttempts: 3 };

/** A response body ended before its Content-Length: the bytes are useless, the request is retried. */
export class TruncatedBodyError extends MinisandboxError {
  constructor(what: string, expected: number, received: number) {
    super('TRUNCATED_BODY', `${what}: body ended after ${received} of ${expected} bytes`, {
      hint: 'the connection to the registry broke mid-transfer; the operation is retried, and if this persists check the network or proxy',
    });
  }
}

/** Every attempt failed with a retryable error, or a non-retryable one came first. */
export class RemoteStoreError extends MinisandboxError {
  readonly attempts: number;
  /** HTTP status of the last failure, if the server answered at all. */
  readonly status: number | undefined;
  /** S3 error code (`SlowDown`, `PreconditionFailed`, ...) or socket error code of the last failure. */
  readonly remoteCode: string | undefined;
  constructor(what: string, attempts: number, cause: unknown, unanswered = false) {
    super(
      'REMOTE_STORE',
      unanswered
        ? `${what}: no answer from the registry, ${attempts} attempt${attempts === 1 ? '' : 's'} in a row timed out (${describe(cause)})`
        : `${what} failed after ${attempts} attempt${attempts === 1 ? '' : 's'}: ${describe(cause)}`,
      {
        hint: unanswered
          ? 'the S3 server accepts connections but answers nothing (stopped or overloaded): check that it is up, then rerun (a pull resumes where it stopped)'
          : isCertificateRefused(cause)
            ? "the registry's TLS certificate is not trusted here: where a private CA signed it, set NODE_EXTRA_CA_CERTS to that CA's PEM file"
            : 'check the registry URL, credentials and network; transient failures were already retried with backoff',
        cause: compact(cause),
      },
    );
    this.attempts = attempts;
    this.status = httpStatusOf(cause);
    const name = field(cause, 'name');
    const code = field(cause, 'code');
    this.remoteCode = typeof code === 'string' ? code : typeof name === 'string' ? name : undefined;
  }
}

/** OpenSSL's verdicts on a peer certificate that node reports as error codes. */
const CERTIFICATE_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The TLS handshake refused the server's certificate (no retry helps; trust or the URL must change). */
export function isCertificateRefused(e: unknown): boolean {
  const code = field(e, 'code');
  if (typeof code === 'string' && CERTIFICATE_CODES.has(code)) return true;
  const cause = field(e, 'cause');
  return cause !== undefined && cause !== e && isCertificateRefused(cause);
}

/** SDK errors carry the whole HTTP response (sockets, agents); keep only what explains the failure. */
function compact(e: unknown): Error {
  const c = new Error(describe(e));
  const name = field(e, 'name');
  if (typeof name === 'string') c.name = name;
  return c;
}

const RETRYABLE_STATUS = new Set([408, 429, 500, 502, 503, 504]);
const RETRYABLE_NAMES = new Set([
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'RequestTimeout',
  'RequestTimeoutException',
  'InternalError',
  'ServiceUnavailable',
  'TimeoutError',
  // S3's answer to two conditional writes racing on one key: the loser may simply try again.
  'ConditionalRequestConflict',
]);
const RETRYABLE_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'ECONNABORTED',
  'EAI_AGAIN',
  'ENOTFOUND',
  'UND_ERR_SOCKET',
  'ERR_STREAM_PREMATURE_CLOSE',
]);

function field(e: unknown, key: string): unknown {
  return typeof e === 'object' && e !== null ? (e as Record<string, unknown>)[key] : undefined;
}

export function httpStatusOf(e: unknown): number | undefined {
  const meta = field(e, '$metadata');
  const status = field(meta, 'httpStatusCode');
  return typeof status === 'number' ? status : undefined;
}

/** The request got no answer within the idle timeout (the socket stayed open and silent). */
export function isUnanswered(e: unknown): boolean {
  const code = field(e, 'code');
  if (code === 'ETIMEDOUT') return true;
  // the SDK also names a reset connection ("socket hang up") TimeoutError: only its timeouts count
  const message = field(e, 'message');
  return field(e, 'name') === 'TimeoutError' && typeof message === 'string' && /timed out|exceeded the configured|no activity/i.test(message);
}

/** Throttling, 5xx, timeouts, resets and truncated bodies are transient; 4xx answers are not. */
export function isRetryable(e: unknown): boolean {
  if (e instanceof TruncatedBodyError) return true;
  if (e instanceof MinisandboxError) return false;
  const status = httpStatusOf(e);
  if (status !== undefined && RETRYABLE_STATUS.has(status)) return true;
  const name = field(e, 'name');
  if (typeof name === 'string' && RETRYABLE_NAMES.has(name)) return true;
  const code = field(e, 'code');
  if (typeof code === 'string' && RETRYABLE_CODES.has(code)) return true;
  const message = field(e, 'message');
  if (typeof message === 'string' && /socket hang up|aborted|premature close|ECONNRESET|EPIPE/i.test(message)) return true;
  const cause = field(e, 'cause');
  return cause !== undefined && cause !== e && isRetryable(cause);
}

export function backoffDelayMs(policy: RetryPolicy, retry: number, random: () => number = Math.random): number {
  const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
  return Math.floor(random() * cap);
}

function describe(e: unknown): string {
  const name = field(e, 'name');
  const status = httpStatusOf(e);
  const message = e instanceof Error ? e.message : String(e);
  return [typeof name === 'string' && name !== 'Error' ? name : '', status === undefined ? '' : `HTTP ${status}`, message].filter((s) => s !== '').join(': ');
}

export interface RetryHooks {
  /** Called before each backoff sleep; counts retries in tests and progress output. */
  onRetry?: (info: { what: string; attempt: number; delayMs: number; error: unknown }) => void;
}

/**
 * Runs `op` until it succeeds, a non-retryable error occurs, or the attempts run out. Typed
 * MinisandboxErrors other than truncation pass through unchanged (NotFound is an answer, not a failure).
 */
export async function withRetry<T>(what: string, policy: RetryPolicy, op: (attempt: number) => Promise<T>, hooks: RetryHooks = {}): Promise<T> {
  let unanswered = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await op(attempt);
    } catch (e) {
      if (!isRetryable(e)) {
        if (e instanceof MinisandboxError) throw e;
        throw new RemoteStoreError(what, attempt, e);
      }
      unanswered = isUnanswered(e) ? unanswered + 1 : 0;
      if (unanswered >= (policy.unansweredAttempts ?? Infinity)) throw new RemoteStoreError(what, unanswered, e, true);
      if (attempt >= policy.attempts) throw new RemoteStoreError(what, attempt, e);
      const delayMs = backoffDelayMs(policy, attempt);
      hooks.onRetry?.({ what, attempt, delayMs, error: e });
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}
