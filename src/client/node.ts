/**
 * One node of a pool: its client, its health, what the pool knows of its capacity and store. A
 * node's requests go through `NodeTransport`: a failure to reach the node is checked with a health
 * probe; a node that does not answer it is down, and every call on it fails with `NodeLostError`
 * until a probe finds it back (pool.ts's monitor probes down nodes, and nodes with calls in flight).
 */
import type { z } from 'zod';
import type { HealthSchema } from '../server/response-schemas.js';
import { Client } from './client.js';
import { CapacityError, NodeLostError, type NodeLostReason, NotConfiguredError, RemoteNotFoundError, TransportError } from './errors.js';
import { type Answer, answerJson, type RequestOptions, Transport } from './transport.js';

type Health = z.infer<typeof HealthSchema>;

export interface NodeCapacity {
  free: number;
  live: number;
  max: number;
}

/** What `POST /v1/holds` said of one ref on a node. */
export interface HoldEntry {
  present: boolean;
  layers_present: number;
  layers: number;
}

/** The sandbox id a request path is about (`/v1/sandboxes/<id>/...`). */
function sandboxIn(path: string): string | undefined {
  const m = /^\/v1\/sandboxes\/([^/?]+)/.exec(path)?.[1];
  return m === undefined ? undefined : decodeURIComponent(m);
}

export class PoolNode {
  readonly url: string;
  name: string | undefined;
  startedAt: string | undefined;
  up = false;
  ready = true;
  reason: 'up' | 'not probed yet' | NodeLostReason = 'not probed yet';
  /** Since when it is down (undefined: up, or not probed yet). */
  downSince: number | undefined;
  misses = 0;
  lastProbe = 0;
  /** false: the node has no /v1/holds (an older server): it counts as cold. */
  holdsRoute: boolean | undefined;
  readonly transport: NodeTransport;
  readonly probe: Transport;
  readonly client: Client;
  private cap: NodeCapacity | undefined;
  private capAt = 0;
  /** The last probe: when it started, whether the node answered. */
  private checked: { at: number; ok: boolean } | undefined;
  private checking: Promise<boolean> | undefined;

  constructor(
    url: string,
    readonly nodeTimeoutMs: number,
    opts: { token: string | undefined; timeoutMs: number; onMade: (node: PoolNode, id: string) => void; onGone: (id: string) => void },
  ) {
    this.url = url.replace(/\/+$/, '');
    this.transport = new NodeTransport(this, opts.token, opts.timeoutMs);
    // probes go around the node's loss checks: they are how the checks learn
    this.probe = new Transport(this.url, { token: opts.token, timeoutMs: nodeTimeoutMs });
    this.client = new Client({}, { transport: this.transport, onMade: (id) => opts.onMade(this, id), onGone: opts.onGone });
  }

  get label(): string {
    return this.name ?? this.url;
  }

  /** One health probe: what the node said, or undefined if it did not answer within the timeout. */
  async probeHealth(timeoutMs = this.nodeTimeoutMs): Promise<Partial<Health> | undefined> {
    try {
      const body = answerJson(await this.probe.request('GET', '/v1/health', { timeoutMs, retryCapacity: false }));
      return typeof body === 'object' && body !== null ? (body as Partial<Health>) : {};
    } catch (e) {
      // a node that answers with an error is there (a 401 says the token is wrong, not the node gone)
      return e instanceof TransportError ? undefined : {};
    }
  }

  /** Takes a probe's outcome: up with its name and start time, or down (from now) for `reason`. */
  record(h: Partial<Health> | undefined, reason: NodeLostReason = 'unreachable', startedAt = Date.now()): void {
    this.lastProbe = Date.now();
    this.checked = { at: startedAt, ok: h !== undefined };
    if (h === undefined) {
      if (this.up || this.downSince === undefined) this.downSince = Date.now();
      this.up = false;
      this.reason = reason;
      this.cap = undefined;
      return;
    }
    if (typeof h.node === 'string' && h.node !== '') this.name = h.node;
    if (typeof h.started_at === 'string') {
      if (this.startedAt !== undefined && h.started_at !== this.startedAt) this.cap = undefined; // restarted: what was counted is gone
      this.startedAt = h.started_at;
    }
    this.up = true;
    this.ready = h.ready !== false;
    this.misses = 0;
    this.downSince = undefined;
    this.reason = 'up';
  }

  /**
   * Whether the node answers now, for a call that started at `since` and failed: a probe; or, where
   * one begun since then found the node gone, that one (many calls failing at once on a node that
   * died probe it once). A probe that found it up before this call failed vouches for nothing.
   */
  check(since: number): Promise<boolean> {
    if (this.checked !== undefined && this.checked.at >= since && !this.checked.ok) return Promise.resolve(false);
    this.checking ??= (async () => {
      const t = Date.now();
      try {
        const h = await this.probeHealth();
        this.record(h, 'unreachable', t);
        return h !== undefined;
      } finally {
        this.checking = undefined;
      }
    })();
    return this.checking;
  }

  lost(sandboxId: string | undefined, cause?: unknown): NodeLostError {
    const why =
      this.reason === 'unresponsive'
        ? 'it stopped answering health probes while calls were in flight'
        : this.reason === 'restarted'
          ? 'it restarted'
          : 'it refused or dropped the connection and did not answer a health probe';
    return new NodeLostError(`${sandboxId === undefined ? '' : `sandbox ${sandboxId} is lost: `}node ${this.label} (${this.url}) is lost: ${why}`, {
      node: this.name ?? this.url,
      sandboxId,
      reason: this.reason === 'unresponsive' || this.reason === 'restarted' ? this.reason : 'unreachable',
      cause,
    });
  }

  /** Free slots: the node's answer if younger than `maxAgeMs` (with the pool's own creates and deletes since), else a fresh one. */
  async capacity(maxAgeMs: number): Promise<NodeCapacity> {
    if (this.cap !== undefined && Date.now() - this.capAt < maxAgeMs) return { ...this.cap };
    const a = await this.transport.request('GET', '/v1/capacity', { timeoutMs: this.nodeTimeoutMs, retryCapacity: false });
    const body = answerJson(a) as { live?: unknown; max?: unknown; free?: unknown; node?: unknown };
    const live = Number(body.live ?? 0);
    const max = Number(body.max ?? 0);
    const free = typeof body.free === 'number' ? body.free : Math.max(0, max - live);
    if (typeof body.node === 'string' && body.node !== '') this.name = body.node;
    this.cap = { free, live, max };
    this.capAt = Date.now();
    return { ...this.cap };
  }

  /** A create placed here (-1 free) or a sandbox deleted here (+1), until the next answer. */
  count(delta: number): void {
    if (this.cap === undefined) return;
    this.cap.free = Math.max(0, Math.min(this.cap.max, this.cap.free + delta));
    this.cap.live = Math.max(0, this.cap.live - delta);
  }

  /** It answered 429: no free slot until it says otherwise. */
  full(): void {
    if (this.cap !== undefined) this.cap.free = 0;
    else this.cap = { free: 0, live: 0, max: 0 };
    this.capAt = Date.now();
  }

  /** The node's holds entry for `body`, or undefined where it cannot say (an older server): cold. */
  async holds(body: Record<string, unknown>): Promise<HoldEntry | undefined> {
    if (this.holdsRoute === false) return undefined;
    let a: Answer;
    try {
      a = await this.transport.request('POST', '/v1/holds', { json: body, timeoutMs: this.nodeTimeoutMs, retryCapacity: false });
    } catch (e) {
      if ((e instanceof RemoteNotFoundError && e.missingRoute) || e instanceof NotConfiguredError) {
        this.holdsRoute = false;
        return undefined;
      }
      throw e;
    }
    this.holdsRoute = true;
    const holds = (answerJson(a) as { holds?: HoldEntry[] } | undefined)?.holds;
    return holds?.[0];
  }
}

/**
 * A node's transport: a failure to reach the node is checked with a health probe. A node that does
 * not answer it is lost (NodeLostError); one that answers gets the request once more if it never
 * reached it (no connection was made), else the failure is the request's own and is thrown as it was.
 */
export class NodeTransport extends Transport {
  constructor(
    readonly node: PoolNode,
    token: string | undefined,
    timeoutMs: number,
  ) {
    super(node.url, { token, timeoutMs });
  }

  override async request(method: string, path: string, opts: RequestOptions = {}): Promise<Answer> {
    const node = this.node;
    const sid = sandboxIn(path);
    if (!node.up && node.downSince !== undefined) throw node.lost(sid);
    let t0 = Date.now();
    try {
      return await super.request(method, path, opts);
    } catch (e) {
      if (e instanceof NodeLostError) throw e; // 410 NODE_RESTARTED: the node is back, the sandbox is not
      if (e instanceof CapacityError || !(e instanceof TransportError)) throw e;
      if (!node.up && node.downSince !== undefined) throw node.lost(sid, e); // the monitor broke this call
      if (!(await node.check(t0))) throw node.lost(sid, e);
      if (e.sent) throw e;
    }
    t0 = Date.now();
    try {
      return await super.request(method, path, opts);
    } catch (e) {
      if (e instanceof NodeLostError || !(e instanceof TransportError) || (await node.check(t0))) throw e;
      throw node.lost(sid, e);
    }
  }
}
