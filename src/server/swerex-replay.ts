/**
 * `X-Request-ID` idempotency for the SWE-ReX face: a POST retried with the same id (under the same
 * key) gets the first answer, and its work runs once. A retry that arrives while the first is
 * still running waits for that answer; the first runs to its end even if its client went away
 * (that is when clients retry). SWE-ReX's own server keeps only the last answer; this keeps a
 * bounded number per key, since one server holds many sandboxes whose clients interleave.
 */
import type { FastifyRequest } from 'fastify';

/** The first run's result: its answer, or the error it raised (raised again for each retry). */
type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface ReplayLimits {
  /** Answers kept per key (oldest dropped first). */
  perKey: number;
  /** Keys kept (the least recently used dropped first). */
  keys: number;
}

export class ReplayCache {
  private readonly byKey = new Map<string, Map<string, Promise<Outcome>>>();
  constructor(private readonly limits: ReplayLimits = { perKey: 64, keys: 4096 }) {}

  /**
   * Runs `fn` once per (key, request id); later calls with the same pair get its answer, or its
   * error where `keepError` says the error is the answer (an error of the server's own, such as a
   * full server, is not: a retry runs again).
   */
  async once<T>(key: string, rid: string, fn: () => Promise<T>, keepError: (e: unknown) => boolean = () => true): Promise<T> {
    let ids = this.byKey.get(key);
    if (ids === undefined) {
      ids = new Map();
      if (this.byKey.size >= this.limits.keys) this.byKey.delete(this.byKey.keys().next().value!);
    } else this.byKey.delete(key);
    this.byKey.set(key, ids); // most recently used last
    let run = ids.get(rid);
    if (run === undefined) {
      run = fn().then(
        (value): Outcome => ({ ok: true, value }),
        (error: unknown): Outcome => ({ ok: false, error }),
      );
      ids.set(rid, run);
      if (ids.size > this.limits.perKey) ids.delete(ids.keys().next().value!);
    }
    const o = await run;
    if (!o.ok) {
      if (!keepError(o.error) && ids.get(rid) === run) ids.delete(rid);
      throw o.error;
    }
    return o.value as T;
  }
}

/** The request's X-Request-ID, if it sent a usable one. */
export function requestIdOf(req: FastifyRequest): string | undefined {
  const v = req.headers['x-request-id'];
  return typeof v === 'string' && v !== '' && v.length <= 256 ? v : undefined;
}
