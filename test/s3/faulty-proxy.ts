/**
 * A loopback HTTP proxy in front of an S3 server that injects the failures real networks and S3
 * produce: 500 and 503 SlowDown answers, connection resets (before the request reaches the server,
 * or after it was applied and before the client hears back), slow answers, truncated bodies, and
 * bodies that stall half-way with the connection left open (only the client's idle timeout helps),
 * and requests never answered at all, the connection left open (a server stopped with SIGSTOP).
 * Faults follow a fixed schedule (request n gets schedule[n]) or seeded probabilities, so every run
 * injects the same faults. Bounded (maxFaults) and self-stopping (lifetimeMs), so a forgotten proxy
 * neither fails a whole suite nor keeps the test runner alive. It also logs every request, which
 * makes it the request counter of tests and benchmarks (with no faults configured).
 *
 * s3rver ignores conditional writes; with `enforceConditionalWrites` the proxy answers a PUT whose
 * If-None-Match / If-Match does not hold with 412 PreconditionFailed, as S3 does (checked with a
 * HEAD just before forwarding, so not atomic: tests make their races deterministic through
 * `beforeConditionalPut`, which runs between the client's request and that check).
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rng } from '../helpers/rng.js';

export const FAULTS = ['status500', 'status503', 'reset', 'reset-after', 'slow', 'truncate', 'stall', 'silent'] as const;
export type Fault = (typeof FAULTS)[number];

export interface RequestInfo {
  method: string;
  /** Path without the query string, e.g. `/bucket/prefix/blobs/sha256/ab..`. */
  path: string;
  query: URLSearchParams;
}

export interface RequestRecord extends RequestInfo {
  fault: Fault | null;
  /** The request headers that tests assert on (ranges, conditional writes). */
  range: string | undefined;
  ifMatch: string | undefined;
  ifNoneMatch: string | undefined;
  /** Set when the proxy itself refused a conditional write with 412. */
  preconditionFailed?: boolean;
}

export interface FaultPlan {
  /** The n-th eligible request gets schedule[n] (null: none); later requests get none. */
  schedule?: (Fault | null)[];
  /** Otherwise each eligible request draws a fault with these probabilities (summing to <= 1). */
  probabilities?: Partial<Record<Fault, number>>;
  seed?: number;
  /** Which requests may get a fault (default all). */
  match?: (r: RequestInfo) => boolean;
  /** No more faults after this many (default: schedule length, or 1000). */
  maxFaults?: number;
  /** Delay of a 'slow' answer (default 2000 ms). */
  slowMs?: number;
  /** Answer conditional PUTs whose condition fails with 412 PreconditionFailed. */
  enforceConditionalWrites?: boolean;
  /** Runs before a conditional PUT is checked and forwarded (e.g. a rival's write to the server). */
  beforeConditionalPut?: (r: RequestInfo) => Promise<void>;
}

export interface FaultyProxy {
  endpoint: string;
  readonly log: RequestRecord[];
  readonly faultsInjected: number;
  /** Most requests the proxy had open at once: checks client-side concurrency bounds. */
  readonly peakConcurrent: number;
  /** Replaces the plan (and restarts its schedule, seed and fault count). */
  setPlan(plan: FaultPlan): void;
  /** Requests in the log matching a method and a path/query predicate. */
  count(method: string, pred?: (r: RequestRecord) => boolean): number;
  stop(): Promise<void>;
}

class Plan {
  private eligible = 0;
  private injected = 0;
  private readonly random: () => number;
  constructor(readonly spec: FaultPlan) {
    this.random = rng(spec.seed ?? 1);
  }
  get faults(): number {
    return this.injected;
  }
  draw(r: RequestInfo): Fault | null {
    if (this.spec.match !== undefined && !this.spec.match(r)) return null;
    const n = this.eligible++;
    const max = this.spec.maxFaults ?? (this.spec.schedule !== undefined ? this.spec.schedule.length : 1000);
    if (this.injected >= max) return null;
    let f: Fault | null = null;
    if (this.spec.schedule !== undefined) {
      f = this.spec.schedule[n] ?? null;
    } else if (this.spec.probabilities !== undefined) {
      let x = this.random();
      for (const k of FAULTS) {
        const p = this.spec.probabilities[k] ?? 0;
        if (x < p) {
          f = k;
          break;
        }
        x -= p;
      }
    }
    if (f !== null) this.injected++;
    return f;
  }
}

function errorXml(code: string, message: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>faulty-proxy</RequestId></Error>`;
}

/** opts.host: the address to listen on (default loopback; another host's, for a registry host of a test's own network). */
export async function startFaultyProxy(upstream: string, plan: FaultPlan = {}, opts: { lifetimeMs?: number; host?: string } = {}): Promise<FaultyProxy> {
  const up = new URL(upstream);
  const log: RequestRecord[] = [];
  let current = new Plan(plan);
  let open = 0;
  let peak = 0;

  const answer = (res: ServerResponse, status: number, code: string, message: string): void => {
    const body = errorXml(code, message);
    res.writeHead(status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

  const forward = (req: IncomingMessage, res: ServerResponse, fault: Fault | null): void => {
    const upReq = httpRequest({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      if (fault === 'reset-after') {
        // The server applied the request; the client never learns it did.
        upRes.resume();
        upRes.on('end', () => req.socket.destroy());
        return;
      }
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      if (fault === 'truncate' || fault === 'stall') {
        const stall = fault === 'stall';
        const declared = Number(upRes.headers['content-length'] ?? '0');
        const cut = Math.floor(declared / 2);
        let sent = 0;
        upRes.on('data', (chunk: Buffer) => {
          if (sent >= cut) return;
          const part = chunk.subarray(0, cut - sent);
          sent += part.length;
          res.write(part);
          if (sent >= cut) {
            upRes.destroy();
            // Let the half body reach the client before the connection dies mid-response; a
            // stalled one stays open until the client gives up or the proxy stops.
            if (!stall) setTimeout(() => req.socket.destroy(), 20);
          }
        });
        if (!stall) upRes.on('end', () => req.socket.destroy());
        if (cut === 0 && !stall) setTimeout(() => req.socket.destroy(), 20);
        return;
      }
      upRes.pipe(res);
    });
    upReq.on('error', () => req.socket.destroy());
    req.on('aborted', () => upReq.destroy());
    res.on('close', () => {
      if (!res.writableFinished) upReq.destroy();
    });
    req.pipe(upReq);
  };

  /** The object's ETag on the server (unquoted), or null if it does not exist. */
  const upstreamEtag = (path: string): Promise<string | null> =>
    new Promise((resolve, reject) => {
      const head = httpRequest({ host: up.hostname, port: up.port, method: 'HEAD', path }, (r) => {
        r.resume();
        resolve(r.statusCode === 200 ? String(r.headers.etag ?? '').replace(/"/g, '') : null);
      });
      head.on('error', reject);
      head.end();
    });

  const conditionHolds = async (req: IncomingMessage): Promise<boolean> => {
    const etag = await upstreamEtag(req.url ?? '/');
    const ifNoneMatch = req.headers['if-none-match'];
    const ifMatch = req.headers['if-match'];
    if (ifNoneMatch === '*' && etag !== null) return false;
    if (ifMatch !== undefined && (etag === null || ifMatch.replace(/"/g, '') !== etag)) return false;
    return true;
  };

  const server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://proxy');
    const info: RequestInfo = { method: req.method ?? 'GET', path: u.pathname, query: u.searchParams };
    open++;
    peak = Math.max(peak, open);
    res.once('close', () => open--);
    const fault = current.draw(info);
    const record: RequestRecord = { ...info, fault, range: req.headers.range, ifMatch: req.headers['if-match'], ifNoneMatch: req.headers['if-none-match'] };
    log.push(record);
    const conditional = req.method === 'PUT' && (record.ifMatch !== undefined || record.ifNoneMatch !== undefined);
    if (fault === null && conditional && current.spec.enforceConditionalWrites === true) {
      req.pause();
      const spec = current.spec;
      void (async () => {
        await spec.beforeConditionalPut?.(info);
        if (await conditionHolds(req)) {
          forward(req, res, null);
          return;
        }
        record.preconditionFailed = true;
        req.resume();
        req.on('end', () => answer(res, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold'));
      })().catch(() => req.socket.destroy());
      return;
    }
    switch (fault) {
      case 'status500':
        req.resume();
        req.on('end', () => answer(res, 500, 'InternalError', 'injected by faulty-proxy'));
        return;
      case 'status503':
        req.resume();
        req.on('end', () => answer(res, 503, 'SlowDown', 'Please reduce your request rate. (injected by faulty-proxy)'));
        return;
      case 'reset':
        req.socket.destroy();
        return;
      case 'silent':
        // read and forgotten: no status line, no reset, until the client gives up or the proxy stops
        req.resume();
        return;
      case 'slow': {
        req.pause();
        const timer = setTimeout(() => forward(req, res, null), current.spec.slowMs ?? 2000);
        req.socket.on('close', () => clearTimeout(timer));
        return;
      }
      default:
        forward(req, res, fault);
    }
  });
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= new Promise<void>((resolve) => {
      clearTimeout(lifetime);
      server.close(() => resolve());
      server.closeAllConnections();
    });
    return stopping;
  };
  const lifetime = setTimeout(() => void stop(), opts.lifetimeMs ?? 10 * 60_000);
  lifetime.unref();

  return {
    endpoint: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    log,
    get faultsInjected() {
      return current.faults;
    },
    get peakConcurrent() {
      return peak;
    },
    setPlan(p: FaultPlan) {
      current = new Plan(p);
    },
    count(method: string, pred?: (r: RequestRecord) => boolean) {
      return log.filter((r) => r.method === method && (pred === undefined || pred(r))).length;
    },
    stop,
  };
}
