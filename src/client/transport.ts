/**
 * HTTP to one `serve` with node's fetch (keep-alive connections are undici's): the token on every
 * request, a timeout per request, answers >= 400 raised as their typed errors (errors.ts), a 429
 * waited out for up to `retryOnCapacityMs`. Every request in flight can be broken at once
 * (`abortInFlight`), for a pool whose node stopped answering.
 */
import { readFileSync } from 'node:fs';
import { CapacityError, errorFromAnswer, TransportError } from './errors.js';

export const USER_AGENT = 'minisandbox-typescript/0.1.0';

export interface Query {
  [name: string]: string | number | boolean | undefined;
}

export interface RequestOptions {
  query?: Query;
  /** A JSON body. */
  json?: unknown;
  /** A raw body (with `contentType`). */
  body?: Uint8Array;
  contentType?: string;
  /** This request's timeout (default the transport's). */
  timeoutMs?: number;
  /** false: a 429 is raised at once, whatever `retryOnCapacityMs` says. */
  retryCapacity?: boolean;
}

export interface Answer {
  status: number;
  headers: Headers;
  body: Buffer;
}

export function answerJson(a: Answer): unknown {
  return a.body.length === 0 ? undefined : JSON.parse(a.body.toString('utf8'));
}

/** The token: the argument, else $MINISANDBOX_TOKEN, else the file (argument or $MINISANDBOX_TOKEN_FILE). */
export function resolveToken(token?: string, tokenFile?: string): string | undefined {
  if (token !== undefined && token !== '') return token;
  const env = process.env.MINISANDBOX_TOKEN;
  if (env !== undefined && env !== '') return env.trim();
  const file = tokenFile ?? process.env.MINISANDBOX_TOKEN_FILE;
  return file === undefined || file === '' ? undefined : readFileSync(file, 'utf8').trim();
}

/** Errors of a connection that was never made: the server cannot have seen the request. */
const NOT_SENT = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENOTFOUND', 'EAI_AGAIN']);

/** The system's code of a fetch failure (fetch wraps it: TypeError('fetch failed', {cause})). */
function failureCode(e: unknown): string | undefined {
  let c: unknown = e;
  for (let i = 0; i < 4 && typeof c === 'object' && c !== null; i++) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    c = (c as { cause?: unknown }).cause;
  }
  return undefined;
}

export class Transport {
  readonly baseUrl: string;
  readonly token: string | undefined;
  readonly timeoutMs: number;
  readonly retryOnCapacityMs: number;
  private readonly inFlight = new Set<AbortController>();

  constructor(baseUrl: string, opts: { token?: string | undefined; timeoutMs: number; retryOnCapacityMs?: number }) {
    const u = new URL(baseUrl);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new TypeError(`baseUrl must be http(s)://host[:port], got ${baseUrl}`);
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.token = opts.token;
    this.timeoutMs = opts.timeoutMs;
    this.retryOnCapacityMs = opts.retryOnCapacityMs ?? 0;
  }

  /** Requests in flight. */
  get busy(): number {
    return this.inFlight.size;
  }

  /** Breaks every request in flight (they reject with a TransportError at once); how many there were. */
  abortInFlight(): number {
    const n = this.inFlight.size;
    for (const c of this.inFlight) c.abort(new Error('the request was broken off: its node stopped answering'));
    return n;
  }

  url(path: string, query?: Query): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, String(v));
    const qs = q.toString();
    return `${this.baseUrl}${path}${qs === '' ? '' : `?${qs}`}`;
  }

  /** One request, its answer read to the end; a status >= 400 raises its typed error. */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<Answer> {
    const deadline = Date.now() + (opts.retryCapacity === false ? 0 : this.retryOnCapacityMs);
    for (;;) {
      try {
        return await this.once(method, path, opts);
      } catch (e) {
        if (!(e instanceof CapacityError)) throw e;
        const waitMs = (e.retryAfterS ?? 1) * 1000;
        if (Date.now() + waitMs > deadline) throw e;
        await new Promise((r) => setTimeout(r, waitMs));
      }
    }
  }

  private async once(method: string, path: string, opts: RequestOptions): Promise<Answer> {
    const headers: Record<string, string> = { 'user-agent': USER_AGENT, accept: 'application/json' };
    if (this.token !== undefined) headers.authorization = `Bearer ${this.token}`;
    let body: Uint8Array<ArrayBuffer> | string | undefined;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] = 'application/json';
    } else if (opts.body !== undefined) {
      const b = opts.body;
      // a view of the same bytes (no copy) as fetch types it; a shared buffer's are copied out
      body = b.buffer instanceof ArrayBuffer ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : new Uint8Array(b);
      headers['content-type'] = opts.contentType ?? 'application/octet-stream';
    }
    const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
    const aborter = new AbortController();
    const timer = setTimeout(() => aborter.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    this.inFlight.add(aborter);
    const target = this.url(path, opts.query);
    try {
      let res: Response;
      try {
        res = await fetch(target, { method, headers, ...(body === undefined ? {} : { body }), signal: aborter.signal });
      } catch (e) {
        const code = failureCode(e);
        const why = aborter.signal.aborted ? String((aborter.signal.reason as Error).message) : `${code ?? ''} ${(e as Error).message}`.trim();
        throw new TransportError(`${method} ${target}: ${why}`, { sent: code === undefined || !NOT_SENT.has(code), cause: e });
      }
      let bytes: Buffer;
      try {
        bytes = Buffer.from(await res.arrayBuffer());
      } catch (e) {
        const why = aborter.signal.aborted ? String((aborter.signal.reason as Error).message) : (e as Error).message;
        throw new TransportError(`${method} ${target}: the answer broke off: ${why}`, { sent: true, cause: e });
      }
      if (res.status >= 400) {
        let parsed: unknown;
        try {
          parsed = JSON.parse(bytes.toString('utf8'));
        } catch {
          parsed = undefined;
        }
        throw errorFromAnswer(res.status, parsed, res.headers.get('retry-after'), bytes.toString('utf8'));
      }
      return { status: res.status, headers: res.headers, body: bytes };
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(aborter);
    }
  }
}
