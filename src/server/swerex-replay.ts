/**
 * `X-Request-ID` idempotency for the SWE-ReX face: a POST retried with the same id (under the same
 * key) gets the first answer, and its work runs once. A retry that arrives while the first is
 * still running waits for that answer; the first runs to its end even if its client went away
 * (that is when clients retry). SWE-ReX's own server keeps only the last answer; this keeps a
 * bounded number per key, since one server holds many sandboxes whose clients interleave, and a
 * bounded number of bytes in all (a command's output is an answer: one key's 64 answers of 8 MiB
 * each would otherwise stay in memory), dropping the oldest answers first.
 */
import type { FastifyRequest } from 'fastify';

/** The first run's result: its answer, or the error it raised (raised again for each retry). */
export type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface ReplayLimits {
  /** Answers kept per key (oldest dropped first). */
  perKey: number;
  /** Keys kept (the least recently used dropped first). */
  keys: number;
  /** Characters of the strings in finished answers kept, over all keys (the oldest dropped first); default 64 Mi. */
  bytes?: number;
}

/** What an answer (or an error that is one) holds: the characters of its strings. */
export type AnswerSize = (o: Outcome) => number;

interface Kept {
  ids: Map<string, Promise<Outcome>>;
  rid: string;
  run: Promise<Outcome>;
  size: number;
}

export class ReplayCache {
  private readonly byKey = new Map<string, Map<string, Promise<Outcome>>>();
  /** Finished answers in the order they finished, with their sizes; `keptBytes` is their sum. */
  private readonly kept: Kept[] = [];
  private keptBytes = 0;
  constructor(
    private readonly limits: ReplayLimits = { perKey: 64, keys: 4096 },
    private readonly sizeOf: AnswerSize = () => 0,
  ) {}

  /** Counts a finished answer, dropping the oldest finished ones while the total is over the bound. */
  private count(ids: Map<string, Promise<Outcome>>, rid: string, run: Promise<Outcome>, o: Outcome): void {
    const size = this.sizeOf(o);
    if (size === 0) return;
    this.kept.push({ ids, rid, run, size });
    this.keptBytes += size;
    while (this.keptBytes > (this.limits.bytes ?? 64 << 20) && this.kept.length > 0) {
      const old = this.kept.shift()!;
      this.keptBytes -= old.size;
      // dropped already (per key, or with its key) where it is no longer the one kept
      if (old.ids.get(old.rid) === old.run) old.ids.delete(old.rid);
    }
  }

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
      const map = ids;
      const started: Promise<Outcome> = fn()
        .then(
          (value): Outcome => ({ ok: true, value }),
          (error: unknown): Outcome => ({ ok: false, error }),
        )
        .then((o) => {
          this.count(map, rid, started, o);
          return o;
        });
      run = started;
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
