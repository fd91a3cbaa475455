/**
 * `Pool`: one client over many `serve` nodes, as the Python client's `minisandbox.Pool`.
 *
 *   const pool = new Pool({ urls: ['http://n1:7000', 'http://n2:7000'] });   // or { dns: 'minisandbox.ns.svc:7000' }
 *   const sb = await pool.create({ ref: 'swe/astropy-12907' });               // placed; the handle stays on its node
 *
 * A create goes to a node that holds the environment laid out (`POST /v1/holds`), then the one with
 * the most of its layers, then the most free slots (`GET /v1/capacity`), ties at random; a 429 or
 * an unreachable node moves it to the next node, `maxAttempts` nodes at most. Handles are the usual
 * `RemoteSandbox` bound to their node's `Client` (the id ends in `.<node>`). A node that dies is a
 * clear event: calls on its sandboxes fail with `NodeLostError` (a refused or dropped connection
 * and no answer to a health probe; or, for a call in flight on a node that stops answering, the
 * monitor's `monitorMisses` probes `monitorIntervalMs` apart); nothing is placed there, and it is
 * probed back in every `probeIntervalMs`.
 */
import { lookup } from 'node:dns/promises';
import { MinisandboxError } from '../errors.js';
import type { Client, CreateOptions, EvaluationAnswer, PrefetchStatus, RemoteSandbox, SandboxInfo } from './client.js';
import { CapacityError, NodeLostError, NotConfiguredError, nodeOf, RemoteNotFoundError, TransportError } from './errors.js';
import { type HoldEntry, type NodeCapacity, PoolNode } from './node.js';
import { resolveToken } from './transport.js';

export interface PoolOptions {
  /** The nodes: a static list of URLs ... */
  urls?: string[];
  /** ... or `name:port` (or `http(s)://name:port`) whose A/AAAA records are the nodes, re-resolved. */
  dns?: string;
  /** One token for every node: default $MINISANDBOX_TOKEN, else `tokenFile` / $MINISANDBOX_TOKEN_FILE. */
  token?: string;
  tokenFile?: string;
  /** A request's timeout when its command has none (default 600 s). */
  timeoutMs?: number;
  /** A health probe's timeout (default 10 s; a connect is bounded by fetch's own 10 s). */
  nodeTimeoutMs?: number;
  /** Nodes a create tries before it fails (default 3). */
  maxAttempts?: number;
  /** A full pool is waited out for up to this long (default 0: fail at once). */
  retryOnCapacityMs?: number;
  /** A down node is probed this often (default 5 s). */
  probeIntervalMs?: number;
  /** Nodes with calls in flight are probed this often (default 2 s) ... */
  monitorIntervalMs?: number;
  /** ... and so many probes unanswered in a row make them down (default 3). */
  monitorMisses?: number;
  /** The DNS name is re-resolved this often (default 30 s). */
  resolveIntervalMs?: number;
  /** A node's capacity is asked again after this long (default 1 s; the pool counts its own creates meanwhile). */
  capacityMaxAgeMs?: number;
  /** What a node holds is asked again after this long (default 30 s). */
  holdsMaxAgeMs?: number;
  /** Ties in placement are broken with this (default Math.random). */
  random?: () => number;
}

export interface PoolCreateOptions extends CreateOptions {
  /** A snapshot pushed to the registry (`snapshot({push: true, tag})`): restored on any node. */
  snapshotRef?: string;
  /** Pin the create to this node (its name or URL); no other is tried. */
  node?: string;
}

export interface NodeStatus {
  node: string | undefined;
  url: string;
  up: boolean;
  free: number | undefined;
  live: number | undefined;
  max: number | undefined;
  startedAt: string | undefined;
  reason: string;
}

type HoldKey = { refs: string[] } | { dataset: string; instance_ids: string[] };

export function holdKey(ref: string | undefined, dataset: string | undefined, instanceId: string | undefined): HoldKey | undefined {
  if (ref !== undefined) return { refs: [ref] };
  if (dataset !== undefined && instanceId !== undefined) return { dataset, instance_ids: [instanceId] };
  return undefined;
}

export interface Candidate<N> {
  node: N;
  cap: NodeCapacity;
  hold: HoldEntry | undefined;
}

/** The contract's order: nodes with a free slot, laid out first, then the most layers, then the most free; ties at random. */
export function placementOrder<N>(cands: Candidate<N>[], random: () => number): N[] {
  const scored = cands
    .filter((c) => c.cap.free > 0)
    .map((c) => ({
      node: c.node,
      present: c.hold?.present === true ? 1 : 0,
      ratio: c.hold !== undefined && c.hold.layers > 0 ? c.hold.layers_present / c.hold.layers : 0,
      free: c.cap.free,
      tie: random(),
    }));
  scored.sort((a, b) => b.present - a.present || b.ratio - a.ratio || b.free - a.free || a.tie - b.tie);
  return scored.map((x) => x.node);
}

function splitDns(dns: string): { scheme: string; host: string; port: number } {
  const u = new URL(dns.includes('://') ? dns : `http://${dns}`);
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '')
    throw new MinisandboxError('INVALID_INPUT', `dns must be name:port or http(s)://name:port, got ${dns}`, { hint: 'e.g. minisandbox.ns.svc:7000' });
  return { scheme: u.protocol.slice(0, -1), host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port === '' ? 7000 : Number(u.port) };
}

/** The node URLs a name's A/AAAA records give, each address once. */
export async function resolveNodes(dns: string): Promise<string[]> {
  const { scheme, host, port } = splitDns(dns);
  const out: string[] = [];
  for (const a of await lookup(host, { all: true })) {
    const url = a.family === 6 ? `${scheme}://[${a.address}]:${port}` : `${scheme}://${a.address}:${port}`;
    if (!out.includes(url)) out.push(url);
  }
  return out;
}

export class Pool {
  private readonly o: Required<Omit<PoolOptions, 'urls' | 'dns' | 'token' | 'tokenFile'>>;
  private readonly dns: string | undefined;
  private readonly token: string | undefined;
  private readonly nodesByUrl = new Map<string, PoolNode>();
  private listed = new Set<string>();
  private resolvedAt = 0;
  /** Sandboxes made through the pool and not deleted since. */
  private readonly heldIds = new Map<string, PoolNode>();
  private readonly holdsCache = new Map<string, { at: number; entry: HoldEntry | undefined }>();
  private readonly probing = new Set<string>();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** The first probe of every node (each public call waits for it). */
  readonly ready: Promise<void>;

  constructor(opts: PoolOptions = {}) {
    let { urls, dns } = opts;
    if (urls === undefined && dns === undefined) {
      const spec = (process.env.MINISANDBOX_POOL ?? '').trim();
      if (spec.startsWith('dns:')) dns = spec.slice(4);
      else if (spec !== '')
        urls = spec
          .split(',')
          .map((u) => u.trim())
          .filter((u) => u !== '');
      else if (process.env.MINISANDBOX_URL !== undefined) urls = [process.env.MINISANDBOX_URL];
    }
    if ((urls === undefined) === (dns === undefined))
      throw new MinisandboxError('INVALID_INPUT', 'a pool takes its nodes as urls or as dns (or $MINISANDBOX_POOL), one of them', {
        hint: "new Pool({ urls: ['http://n1:7000'] }) or new Pool({ dns: 'minisandbox.ns.svc:7000' })",
      });
    if (dns !== undefined) splitDns(dns);
    this.dns = dns;
    this.token = resolveToken(opts.token, opts.tokenFile);
    this.o = {
      timeoutMs: opts.timeoutMs ?? 600_000,
      nodeTimeoutMs: opts.nodeTimeoutMs ?? 10_000,
      maxAttempts: Math.max(1, opts.maxAttempts ?? 3),
      retryOnCapacityMs: opts.retryOnCapacityMs ?? 0,
      probeIntervalMs: opts.probeIntervalMs ?? 5_000,
      monitorIntervalMs: opts.monitorIntervalMs ?? 2_000,
      monitorMisses: Math.max(1, opts.monitorMisses ?? 3),
      resolveIntervalMs: opts.resolveIntervalMs ?? 30_000,
      capacityMaxAgeMs: opts.capacityMaxAgeMs ?? 1_000,
      holdsMaxAgeMs: opts.holdsMaxAgeMs ?? 30_000,
      random: opts.random ?? Math.random,
    };
    for (const u of urls ?? []) this.add(u);
    this.listed = new Set(this.nodesByUrl.keys());
    if (dns === undefined && this.nodesByUrl.size === 0) throw new MinisandboxError('INVALID_INPUT', 'a pool needs at least one node URL');
    this.ready = (async () => {
      if (this.dns !== undefined) await this.resolve();
      await this.probeAll();
    })();
    this.ready.catch(() => undefined); // awaited by each call; unhandled until then is no crash
    this.timer = setInterval(() => void this.tick().catch(() => undefined), this.o.monitorIntervalMs);
    this.timer.unref();
  }

  // -- nodes ---------------------------------------------------------------------------------

  private add(url: string): PoolNode {
    const key = url.replace(/\/+$/, '');
    let n = this.nodesByUrl.get(key);
    if (n === undefined) {
      n = new PoolNode(key, this.o.nodeTimeoutMs, {
        token: this.token,
        timeoutMs: this.o.timeoutMs,
        onMade: (node, id) => void this.heldIds.set(id, node),
        onGone: (id) => {
          const node = this.heldIds.get(id);
          if (node !== undefined && this.heldIds.delete(id)) node.count(+1);
        },
      });
      this.nodesByUrl.set(key, n);
    }
    return n;
  }

  private async resolve(): Promise<void> {
    this.resolvedAt = Date.now();
    if (this.dns === undefined) return;
    let urls: string[];
    try {
      urls = await resolveNodes(this.dns);
    } catch {
      return; // keep what the last answer listed: a resolver hiccup is no reason to drop nodes
    }
    const fresh = urls.filter((u) => !this.nodesByUrl.has(u)).map((u) => this.add(u));
    for (const u of urls) this.add(u);
    this.listed = new Set(urls);
    await Promise.all(fresh.map(async (n) => n.record(await n.probeHealth())));
  }

  private all(): PoolNode[] {
    return [...this.nodesByUrl.values()];
  }

  private placeable(): PoolNode[] {
    return this.all().filter((n) => n.up && this.listed.has(n.url));
  }

  private async probeAll(): Promise<void> {
    await Promise.all(this.all().map(async (n) => n.record(await n.probeHealth())));
  }

  /** The nodes of that name (or URL); a name not seen yet has the unnamed nodes probed first. */
  private async named(name: string): Promise<PoolNode[]> {
    const byUrl = this.nodesByUrl.get(name.replace(/\/+$/, ''));
    if (byUrl !== undefined) return [byUrl];
    let found = this.all().filter((n) => n.name === name);
    if (found.length > 0) return found;
    if (this.dns !== undefined) await this.resolve();
    await Promise.all(
      this.all()
        .filter((n) => n.name === undefined)
        .map(async (n) => n.record(await n.probeHealth())),
    );
    found = this.all().filter((n) => n.name === name);
    return found;
  }

  /** The client of the node of that name (or URL). */
  async client(node: string): Promise<Client> {
    await this.ready;
    const [n] = await this.named(node);
    if (n === undefined) throw new MinisandboxError('NOT_FOUND', `no node ${node} in the pool`, { hint: 'pool.nodes() lists them' });
    return n.client;
  }

  /** Each node, with a fresh capacity of those that answer. */
  async nodes(): Promise<NodeStatus[]> {
    await this.ready;
    return Promise.all(
      this.all().map(async (n): Promise<NodeStatus> => {
        let cap: Partial<NodeCapacity> = {};
        if (n.up) cap = await n.capacity(0).catch(() => ({}));
        return { node: n.name, url: n.url, up: n.up, free: cap.free, live: cap.live, max: cap.max, startedAt: n.startedAt, reason: n.reason };
      }),
    );
  }

  // -- placement -----------------------------------------------------------------------------

  private async hold(n: PoolNode, key: HoldKey | undefined): Promise<HoldEntry | undefined> {
    if (key === undefined) return undefined;
    const k = `${n.url} ${JSON.stringify(key)}`;
    const c = this.holdsCache.get(k);
    if (c !== undefined && Date.now() - c.at < this.o.holdsMaxAgeMs) return c.entry;
    let entry: HoldEntry | undefined;
    try {
      entry = await n.holds(key);
    } catch {
      return undefined; // a node that cannot say counts as cold; its capacity says whether it is there
    }
    this.holdsCache.set(k, { at: Date.now(), entry });
    return entry;
  }

  private heldThere(n: PoolNode, key: HoldKey | undefined): void {
    if (key === undefined) return;
    const k = `${n.url} ${JSON.stringify(key)}`;
    const layers = this.holdsCache.get(k)?.entry?.layers || 1;
    this.holdsCache.set(k, { at: Date.now(), entry: { present: true, layers_present: layers, layers } });
  }

  private noNode(): TransportError {
    const down =
      this.all()
        .map((n) => `${n.label} (${n.reason})`)
        .join(', ') || `${this.dns} lists none`;
    return new TransportError(`no node of the pool answers: ${down}`, {
      sent: false,
      hint: 'check that the nodes run and are reachable; the pool probes them back in by itself',
    });
  }

  private async candidates(key: HoldKey | undefined, pin: string | undefined): Promise<PoolNode[]> {
    let nodes = this.placeable();
    if (pin !== undefined) {
      const [n] = await this.named(pin);
      if (n === undefined) throw new MinisandboxError('NOT_FOUND', `no node ${pin} in the pool`, { hint: 'pool.nodes() lists them' });
      if (!n.up && !(await n.check(Date.now()))) throw n.lost(undefined);
      nodes = [n];
    }
    if (nodes.length === 0) {
      if (this.dns !== undefined) await this.resolve();
      await this.probeAll();
      nodes = this.placeable();
    }
    if (nodes.length === 0) throw this.noNode();
    const asked = await Promise.all(
      nodes.map(async (node) => {
        try {
          return { node, cap: await node.capacity(this.o.capacityMaxAgeMs), hold: await this.hold(node, key) };
        } catch {
          return undefined; // lost (marked down), or no answer fit to place by
        }
      }),
    );
    const got = asked.filter((a): a is NonNullable<typeof a> => a !== undefined);
    if (got.length === 0 && !nodes.some((n) => n.up)) throw this.noNode();
    return placementOrder(got, this.o.random);
  }

  /** `fn(node)` on the first node of the order that takes it; a 429 or a lost node moves on (maxAttempts in all). */
  private async placed<T>(
    key: HoldKey | undefined,
    pin: string | undefined,
    fn: (n: PoolNode) => Promise<T>,
    opts: { holdsSlot?: boolean; nextOn?: (e: unknown) => boolean } = {},
  ): Promise<T> {
    const deadline = Date.now() + this.o.retryOnCapacityMs;
    for (;;) {
      let last: unknown;
      const order = await this.candidates(key, pin);
      for (const n of order.slice(0, this.o.maxAttempts)) {
        n.count(-1); // taken now, so that creates placed meanwhile count it
        try {
          const out = await fn(n);
          if (opts.holdsSlot === false) n.count(+1);
          this.heldThere(n, key);
          return out;
        } catch (e) {
          if (e instanceof CapacityError) n.full();
          else n.count(+1);
          if (e instanceof CapacityError || e instanceof NodeLostError || opts.nextOn?.(e) === true) {
            last = e;
            continue;
          }
          throw e;
        }
      }
      last ??= new CapacityError({
        status: 429,
        serverCode: 'CAPACITY',
        message: `every node of the pool is full (${this.placeable()
          .map((n) => n.label)
          .join(', ')})`,
        hint: 'wait and retry (retryOnCapacityMs does), or add nodes',
        retryAfterS: 1,
      });
      const waitMs = last instanceof CapacityError ? (last.retryAfterS ?? 1) * 1000 : 0;
      if (last instanceof CapacityError && Date.now() + waitMs <= deadline) {
        await new Promise((r) => setTimeout(r, waitMs));
        continue;
      }
      throw last;
    }
  }

  // -- sandboxes -----------------------------------------------------------------------------

  /** A new sandbox on the node placement picks (`node` pins one), from `ref`, `dataset` + `instanceId`, `snapshot` or `snapshotRef`. */
  async create(opts: PoolCreateOptions): Promise<RemoteSandbox> {
    await this.ready;
    const { snapshotRef, node, ...rest } = opts;
    if (snapshotRef !== undefined && (rest.ref !== undefined || rest.snapshot !== undefined))
      throw new MinisandboxError('INVALID_INPUT', 'give one of ref, snapshot or snapshotRef');
    const create: CreateOptions = snapshotRef === undefined ? rest : { ...rest, ref: snapshotRef };
    const pin = node ?? (create.snapshot === undefined ? undefined : await this.snapshotNode(create.snapshot));
    return this.placed(holdKey(create.ref, create.dataset, create.instanceId), pin, (n) => n.client.create(create));
  }

  private async snapshotNode(snapshot: string): Promise<string> {
    const has = await Promise.all(
      this.placeable().map(async (n) => ((await n.client.snapshots().catch(() => [])).some((s) => s.snapshot === snapshot) ? n : undefined)),
    );
    const n = has.find((x) => x !== undefined);
    if (n === undefined)
      throw new MinisandboxError('NOT_FOUND', `snapshot ${snapshot} not found on any node of the pool`, {
        hint: 'a snapshot lives on the node that made it: push it (snapshot({push: true, tag})) and create({snapshotRef: tag})',
      });
    return n.url;
  }

  private async nodeFor(id: string): Promise<PoolNode> {
    const held = this.heldIds.get(id);
    if (held !== undefined) return held;
    const name = nodeOf(id);
    const nodes = name === undefined ? this.placeable() : await this.named(name);
    if (name !== undefined && nodes.length === 0)
      throw new MinisandboxError('NOT_FOUND', `sandbox ${id}: no node ${name} in the pool`, { hint: 'the id names the node that made it: is it in the pool?' });
    const [only] = nodes;
    if (nodes.length === 1 && only !== undefined) return only;
    // an id that names no node (a server without --node-name), or a name two nodes share: ask each
    const found = await Promise.all(
      nodes.map(async (n) =>
        (await n.client.info(id).then(
          () => true,
          () => false,
        ))
          ? n
          : undefined,
      ),
    );
    const n = found.find((x) => x !== undefined);
    if (n === undefined) throw new RemoteNotFoundError({ status: 404, serverCode: 'NOT_FOUND', message: `sandbox ${id} not found on any node of the pool` });
    return n;
  }

  /** A handle on an existing sandbox, bound to the node its id names (without a request; an id that names no node is looked for). */
  async sandbox(id: string): Promise<RemoteSandbox> {
    await this.ready;
    return (await this.nodeFor(id)).client.sandbox(id);
  }

  /** A handle on an existing sandbox, looked up on its node (RemoteNotFoundError if gone, NodeLostError if its node is). */
  async get(id: string): Promise<RemoteSandbox> {
    await this.ready;
    return (await this.nodeFor(id)).client.get(id);
  }

  async info(id: string): Promise<SandboxInfo> {
    await this.ready;
    return (await this.nodeFor(id)).client.info(id);
  }

  async delete(id: string, opts: { missingOk?: boolean } = {}): Promise<void> {
    await this.ready;
    await (await this.nodeFor(id)).client.delete(id, opts);
  }

  /** Every node's sandboxes (of the nodes that answer). */
  async list(): Promise<SandboxInfo[]> {
    await this.ready;
    return (
      await Promise.all(this.placeable().map((n) => n.client.list().catch((e: unknown) => (e instanceof NodeLostError ? [] : Promise.reject(e)))))
    ).flat();
  }

  /** The ids of the sandboxes made through the pool and not deleted since. */
  held(): string[] {
    return [...this.heldIds.keys()];
  }

  /** `Client.evaluate` on a node that holds the instance's environment and has room; a full or lost node, or one that grades nothing (501), moves it on. */
  async evaluate(
    dataset: string,
    instanceId: string,
    patch: string | null,
    opts: { model?: string; runId?: string; timeout?: number | string } = {},
  ): Promise<EvaluationAnswer> {
    await this.ready;
    return this.placed(holdKey(undefined, dataset, instanceId), undefined, (n) => n.client.evaluate(dataset, instanceId, patch, opts), {
      holdsSlot: false,
      nextOn: (e) => e instanceof NotConfiguredError,
    });
  }

  /** The `host` for SWE-ReX's RemoteDeployment (port null): a sandbox id on its node, or `inst:<dataset>:<instance_id>` placed as its create would be. */
  async swerexUrl(key: string): Promise<string> {
    await this.ready;
    let n: PoolNode | undefined;
    if (key.startsWith('inst:')) {
      const [, dataset, instanceId] = key.split(':', 3);
      [n] = await this.candidates(holdKey(undefined, dataset, instanceId), undefined);
      if (n === undefined) throw new CapacityError({ status: 429, serverCode: 'CAPACITY', message: 'every node of the pool is full', retryAfterS: 1 });
      n.count(-1);
    } else n = await this.nodeFor(key);
    return `${n.url}/swerex/${encodeURIComponent(key).replace(/%3A/g, ':')}`;
  }

  /** Starts every node pulling `refs` or a dataset's environments in the background; by node, how it goes (or the error). */
  async prefetch(
    what: { refs: string[] } | { dataset: string; instanceIds?: string[] },
    ioBudget?: number | string,
  ): Promise<Map<string, PrefetchStatus | MinisandboxError>> {
    await this.ready;
    return this.each((n) => n.client.prefetch(what, ioBudget));
  }

  async prefetchStatus(): Promise<Map<string, PrefetchStatus | MinisandboxError>> {
    await this.ready;
    return this.each((n) => n.client.prefetchStatus());
  }

  private async each<T>(fn: (n: PoolNode) => Promise<T>): Promise<Map<string, T | MinisandboxError>> {
    const out = await Promise.all(
      this.placeable().map(async (n): Promise<[string, T | MinisandboxError]> => {
        try {
          return [n.label, await fn(n)];
        } catch (e) {
          if (e instanceof MinisandboxError) return [n.label, e];
          throw e;
        }
      }),
    );
    return new Map(out);
  }

  // -- monitor -------------------------------------------------------------------------------

  private async tick(): Promise<void> {
    if (this.dns !== undefined && Date.now() - this.resolvedAt >= this.o.resolveIntervalMs) await this.resolve();
    for (const n of this.all()) {
      if (!n.up) {
        n.transport.abortInFlight(); // a call that slipped in before it was marked down
        if (n.downSince !== undefined && Date.now() - n.lastProbe >= this.o.probeIntervalMs)
          this.probeOnce(n, async () => n.record(await n.probeHealth(), n.reason === 'up' || n.reason === 'not probed yet' ? 'unreachable' : n.reason));
      } else if (n.transport.busy > 0) this.probeOnce(n, () => this.checkBusy(n));
    }
  }

  private probeOnce(n: PoolNode, fn: () => Promise<void>): void {
    if (this.probing.has(n.url)) return;
    this.probing.add(n.url);
    void fn()
      .catch(() => undefined)
      .finally(() => this.probing.delete(n.url));
  }

  /** A node with calls in flight: `monitorMisses` probes unanswered in a row and it is down, its calls broken (NodeLostError). */
  private async checkBusy(n: PoolNode): Promise<void> {
    const h = await n.probeHealth(this.o.monitorIntervalMs);
    if (h !== undefined) {
      n.record(h);
      return;
    }
    n.misses++;
    if (n.misses >= this.o.monitorMisses) {
      n.record(undefined, 'unresponsive');
      n.transport.abortInFlight();
    }
  }

  // -- end -----------------------------------------------------------------------------------

  /** Deletes the sandboxes made through the pool that are still there (those of lost nodes are gone with them) and stops the monitor. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.ready.catch(() => undefined);
    await Promise.all(
      this.held().map(async (id) =>
        this.heldIds
          .get(id)
          ?.client.delete(id, { missingOk: true })
          .catch(() => undefined),
      ),
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
