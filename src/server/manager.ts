/**
 * The sandboxes one server holds: creation under a cap, lookup, per-sandbox sessions, TTL and idle
 * expiry (one reaper timer), fork child by child, and destroy-all on shutdown. All of it lives in
 * one object per server so that nothing is global and tests can run several.
 */
import { randomBytes } from 'node:crypto';
import { MinisandboxError, NotFoundError } from '../errors.js';
import type { OpenOptions } from '../runtime/open.js';
import type { SnapshotRecord, Snapshots } from '../runtime/snapshot.js';
import type { ForkResult, Sandbox } from '../sandbox/sandbox.js';
import type { Session } from '../sandbox/session.js';
import { captureShellState, restoreShellState, type ShellState } from '../sandbox/shell-state.js';
import { ByteBudget } from '../util/byte-budget.js';
import { DEFAULT_JOB_LIMITS, type JobLimits } from './job-limits.js';
import { DEFAULT_MEMORY_LIMITS, type MemoryLimits } from './memory-limits.js';
import { ServerMetrics } from './metrics.js';
import { lostInRestart, type NodeIdentity, NodeRestartedError } from './node-identity.js';

/** How sandboxes are made: from the store and registry in production (see serve.ts), anything in tests. */
export interface SandboxProvider {
  open(ref: string, opts: OpenOptions): Promise<Sandbox>;
  /** `n` children of the sandbox's current state, each reported on its own. */
  fork(sb: Sandbox, n: number): Promise<ForkResult[]>;
  /** Back to its creation state, or over a snapshot of this node, or over an environment of the registry. */
  reset(sb: Sandbox, to?: ResetTarget): Promise<void>;
  /** The node's snapshots, where the server has a store. */
  snapshots?: Snapshots;
}

/** Where a reset goes: a snapshot of this node, or a ref of the registry (a snapshot another node pushed). */
export type ResetTarget = { snapshot: string } | { ref: string };

export type ForkChild = { id: string; session?: string } | { error: { code: string; message: string } };

/** Snapshots need a store; a server without one (tests) says so. */
function noSnapshots(): MinisandboxError {
  return new MinisandboxError('NOT_CONFIGURED', 'this server keeps no snapshots (it has no store)', {
    hint: "run `minisandbox serve`, which has the node's store",
  });
}

function errorOf(e: unknown): { code: string; message: string } {
  return { code: e instanceof MinisandboxError ? e.code : 'SANDBOX_START', message: e instanceof Error ? e.message : String(e) };
}

export interface ManagerOptions {
  maxSandboxes: number;
  /** The longest a sandbox lives; a create may ask for less. */
  ttlMs: number;
  /** Destroyed after this long without a request (a running command counts as use). */
  idleMs: number;
  /** How often expiry is checked; default a second (or less for short limits). */
  reapEveryMs?: number;
  /** Called when the reaper ends a sandbox (for the request log). */
  onReaped?: (id: string, why: 'ttl' | 'idle') => void;
  /** Default: DEFAULT_JOB_LIMITS. */
  jobs?: Partial<JobLimits>;
  /** Niceness of sandboxes whose options give none (limits.nice); default 0. */
  sandboxNice?: number;
  /** Default: DEFAULT_MEMORY_LIMITS. */
  memory?: Partial<MemoryLimits>;
  /** The node this server is: its sandbox ids end in `.<name>`; ids it made before it started are answered 410. */
  node?: NodeIdentity;
}

/** Full for now: answered 429 with a Retry-After of `retryAfterS` seconds. */
export class RetryLaterError extends MinisandboxError {
  constructor(
    message: string,
    hint: string,
    readonly retryAfterS: number,
  ) {
    super('CAPACITY', message, { hint });
  }
}

export class CapacityError extends RetryLaterError {
  constructor(max: number, retryAfterS: number) {
    super(
      `this server already holds its maximum of ${max} sandboxes`,
      `delete sandboxes you are done with, or retry after ${retryAfterS} s; --max-sandboxes raises the cap`,
      retryAfterS,
    );
  }
}

/** Async exec jobs' bounds, per sandbox (see jobs.ts). */
export { DEFAULT_JOB_LIMITS, type JobLimits };

export interface Entry {
  sb: Sandbox;
  /** The ref it runs over: the one it was created from, or last reset to. */
  ref: string;
  /** The ref it was created from, where a reset to another ref changed `ref`. */
  createdRef?: string;
  createdAt: number;
  expiresAt: number;
  lastUsed: number;
  /** Requests in flight on it: a sandbox running a command is never idle. */
  busy: number;
  sessions: Map<string, Session>;
  forkedFrom?: string;
  /** The snapshot it was created from, or last reset to. */
  snapshot?: string;
  /**
   * Made by the server for its own work (an evaluation): it holds a slot, uses memory and is reaped
   * and shut down like any other, but it is no client's, so the API neither lists nor reaches it.
   */
  internal?: true;
}

/** Which sandboxes a lookup may find: a client's only, or also the server's own (see Entry.internal). */
export interface Reach {
  internal?: boolean;
}

export interface SandboxInfo {
  id: string;
  ref: string;
  created_at: string;
  expires_at: string;
  idle_since: string | null;
  sessions: string[];
  forked_from?: string;
  snapshot?: string;
}

/** How many sandboxes that ended by themselves (their holder died) are remembered, with why. */
const LOST_KEPT = 1024;

export class SandboxManager {
  readonly metrics = new ServerMetrics();
  /** What requests hold in memory at once (see MemoryLimits.budgetBytes). */
  readonly memory: ByteBudget;
  /** The largest max_output a request may ask for (see MemoryLimits.maxOutputBytes). */
  readonly maxOutputBytes: number;
  private readonly entries = new Map<string, Entry>();
  /** Sandboxes also known by a name (the SWE-ReX face's `inst:` keys): the id, or its create in flight. */
  private readonly names = new Map<string, string | Promise<Entry>>();
  /** Creates in progress hold a slot, so a burst cannot overshoot the cap. */
  private pending = 0;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  private readonly lost = new Map<string, string>();

  constructor(
    private readonly provider: SandboxProvider,
    readonly opts: ManagerOptions,
  ) {
    const memory = { ...DEFAULT_MEMORY_LIMITS, ...opts.memory };
    this.memory = new ByteBudget(memory.budgetBytes);
    this.maxOutputBytes = memory.maxOutputBytes;
    const every = opts.reapEveryMs ?? Math.max(50, Math.min(1000, Math.floor(Math.min(opts.ttlMs, opts.idleMs) / 4)));
    this.timer = setInterval(() => void this.reap(), every);
    this.timer.unref();
  }

  get live(): number {
    return this.entries.size;
  }

  get max(): number {
    return this.opts.maxSandboxes;
  }

  get jobLimits(): JobLimits {
    return { ...DEFAULT_JOB_LIMITS, ...this.opts.jobs };
  }

  private reserve(): void {
    if (this.closed) throw new MinisandboxError('SANDBOX_DESTROYED', 'the server is shutting down', { hint: 'retry against a running server' });
    if (this.entries.size + this.pending >= this.opts.maxSandboxes) throw new CapacityError(this.opts.maxSandboxes, this.retryAfterS());
    this.pending++;
  }

  /** Seconds until the first sandbox is due to expire (at least 1, at most 60): when a slot may free up. */
  private retryAfterS(): number {
    const now = Date.now();
    let soonest = Infinity;
    for (const e of this.entries.values()) soonest = Math.min(soonest, e.expiresAt - now, e.busy > 0 ? Infinity : e.lastUsed + this.opts.idleMs - now);
    return Math.max(1, Math.min(60, Math.ceil(soonest / 1000)));
  }

  private register(sb: Sandbox, ref: string, ttlMs: number, forkedFrom?: string, internal?: boolean): Entry {
    const now = Date.now();
    const e: Entry = {
      sb,
      ref,
      createdAt: now,
      expiresAt: now + ttlMs,
      lastUsed: now,
      busy: 0,
      sessions: new Map(),
      ...(forkedFrom === undefined ? {} : { forkedFrom }),
      ...(internal === true ? { internal } : {}),
    };
    this.entries.set(sb.id, e);
    this.metrics.createsTotal++;
    return e;
  }

  /** The server's defaults for what a create leaves out: niceness, and the node its id names. */
  private niced(opts: OpenOptions): OpenOptions {
    const nice = opts.limits?.nice ?? this.opts.sandboxNice;
    const node = this.opts.node === undefined || opts.idNode !== undefined ? {} : { idNode: this.opts.node.name };
    return nice === undefined ? { ...opts, ...node } : { ...opts, ...node, limits: { ...opts.limits, nice } };
  }

  /** No such sandbox: 410 for one this node held before it restarted, else 404. */
  private missing(id: string, hint: string): MinisandboxError {
    if (this.opts.node !== undefined && lostInRestart(id, this.opts.node)) return new NodeRestartedError(id, this.opts.node);
    return new NotFoundError(`sandbox ${id}`, hint);
  }

  /** `reach.internal`: a sandbox of the server's own (see Entry.internal). */
  async create(ref: string, opts: OpenOptions, ttlMs: number | undefined, reach: Reach = {}): Promise<Entry> {
    this.reserve();
    try {
      const sb = await this.provider.open(ref, this.niced(opts));
      if (this.closed) {
        await sb.destroy();
        throw new MinisandboxError('SANDBOX_DESTROYED', 'the server shut down while the sandbox started', { hint: 'retry against a running server' });
      }
      return this.register(sb, ref, Math.min(ttlMs ?? this.opts.ttlMs, this.opts.ttlMs), undefined, reach.internal);
    } finally {
      this.pending--;
    }
  }

  /** Looking a sandbox up is not using it: a client polling its status does not keep it alive. */
  get(id: string, reach: Reach = {}): Entry {
    const e = this.entries.get(id);
    const lost = e === undefined ? this.lost.get(id) : e.sb.lostBecause;
    if (lost !== undefined && e?.internal !== true)
      throw new MinisandboxError('SANDBOX_DESTROYED', `sandbox ${id} ended: ${lost}`, { hint: 'create a new sandbox (its state is gone)' });
    if (e === undefined || !e.sb.alive || (e.internal === true && reach.internal !== true))
      throw this.missing(id, 'list live sandboxes with GET /v1/sandboxes; it may have passed its TTL or idle timeout');
    return e;
  }

  /** Runs `fn` with the sandbox marked busy, so the idle reaper leaves it alone meanwhile. */
  async use<T>(id: string, fn: (e: Entry) => Promise<T>, reach: Reach = {}): Promise<T> {
    const e = this.get(id, reach);
    e.lastUsed = Date.now();
    e.busy++;
    try {
      return await fn(e);
    } finally {
      e.busy--;
      e.lastUsed = Date.now();
    }
  }

  /** The clients' sandboxes (the server's own are not listed, though they count in `live`). */
  list(): SandboxInfo[] {
    return [...this.entries.values()].filter((e) => e.internal !== true).map((e) => this.info(e));
  }

  /** Every sandbox held, the server's own included: what capacity accounting adds up. */
  held(): Entry[] {
    return [...this.entries.values()];
  }

  info(e: Entry): SandboxInfo {
    return {
      id: e.sb.id,
      ref: e.ref,
      created_at: new Date(e.createdAt).toISOString(),
      expires_at: new Date(e.expiresAt).toISOString(),
      idle_since: e.busy > 0 ? null : new Date(e.lastUsed).toISOString(),
      sessions: [...e.sessions.keys()],
      ...(e.forkedFrom === undefined ? {} : { forked_from: e.forkedFrom }),
      ...(e.snapshot === undefined ? {} : { snapshot: e.snapshot }),
    };
  }

  async destroy(id: string, reach: Reach = {}): Promise<void> {
    const e = this.entries.get(id);
    if (e === undefined || (e.internal === true && reach.internal !== true)) throw this.missing(id, 'list live sandboxes with GET /v1/sandboxes');
    this.entries.delete(id);
    await e.sb.destroy();
  }

  /**
   * `count` children of the sandbox's current state (one frozen copy of its writes, shared), each
   * reported on its own: a failed child does not undo the others. With `session`, each child gets
   * a session of the same id, in that parent session's cwd with its exported variables.
   */
  async fork(id: string, count: number, session?: string): Promise<ForkChild[]> {
    return this.use(id, async (parent) => {
      let shell: ShellState | undefined;
      if (session !== undefined) {
        const s = parent.sessions.get(session);
        if (s === undefined) throw new NotFoundError(`session ${session} in sandbox ${id}`, 'list its sessions with GET /v1/sandboxes/:id');
        shell = await captureShellState(s);
      }
      const out: ForkChild[] = [];
      let slots = 0;
      for (let i = 0; i < count; i++) {
        try {
          this.reserve();
          slots++;
        } catch (e) {
          this.metrics.error(e instanceof MinisandboxError ? e.code : 'CAPACITY');
          out.push({ error: errorOf(e) });
        }
      }
      let results: ForkResult[];
      try {
        results = slots === 0 ? [] : await this.provider.fork(parent.sb, slots);
      } catch (e) {
        results = Array.from({ length: slots }, () => ({ ok: false, error: e }));
      } finally {
        this.pending -= slots;
      }
      const children = await Promise.all(
        results.map(async (r): Promise<ForkChild> => {
          if (!r.ok) {
            this.metrics.error(errorOf(r.error).code);
            return { error: errorOf(r.error) };
          }
          const child = r.sandbox;
          if (this.closed) {
            await child.destroy();
            return { error: { code: 'SANDBOX_DESTROYED', message: 'the server is shutting down' } };
          }
          const e = this.register(child, parent.ref, Math.max(1, parent.expiresAt - Date.now()), parent.sb.id);
          if (parent.snapshot !== undefined) e.snapshot = parent.snapshot;
          if (session === undefined || shell === undefined) return { id: child.id };
          try {
            const s = child.newSession();
            e.sessions.set(session, s);
            await restoreShellState(s, shell, ['PATH', 'HOME', ...Object.keys(child.config.env)]);
            return { id: child.id, session };
          } catch (err) {
            this.metrics.error(errorOf(err).code);
            await this.destroy(child.id).catch(() => undefined);
            return { error: errorOf(err) };
          }
        }),
      );
      return [...children, ...out];
    });
  }

  /** The live sandbox known as `name`, if any; never creates one (and never waits for a create). */
  named(name: string): Entry | undefined {
    const v = this.names.get(name);
    if (typeof v !== 'string') return undefined;
    const e = this.entries.get(v);
    if (e !== undefined && e.sb.alive) return e;
    this.names.delete(name); // destroyed or reaped since
    return undefined;
  }

  /**
   * The sandbox known as `name`, made by `make` on first use. Callers that ask while it is being
   * made share that one create; a create that fails leaves the name free for the next caller.
   */
  async namedOrCreate(name: string, make: () => Promise<Entry>): Promise<Entry> {
    const live = this.named(name);
    if (live !== undefined) return live;
    const pending = this.names.get(name);
    if (pending !== undefined && typeof pending !== 'string') return pending;
    const creating = make().then(
      (e) => {
        if (this.names.get(name) === creating) this.names.set(name, e.sb.id);
        return e;
      },
      (err: unknown) => {
        if (this.names.get(name) === creating) this.names.delete(name);
        throw err;
      },
    );
    this.names.set(name, creating);
    return creating;
  }

  /** Destroys the sandbox known as `name` (waiting for its create if one is in flight) and frees the name. */
  async destroyNamed(name: string): Promise<boolean> {
    const v = this.names.get(name);
    if (v === undefined) return false;
    this.names.delete(name);
    const id = typeof v === 'string' ? v : await v.then((e) => e.sb.id).catch(() => undefined);
    if (id === undefined || !this.entries.has(id)) return false;
    await this.destroy(id);
    return true;
  }

  /** Back to its creation state (or a snapshot's, or a ref's): same id; its commands and sessions end. */
  async reset(id: string, to?: ResetTarget): Promise<SandboxInfo> {
    return this.use(id, async (e) => {
      if (to !== undefined && 'snapshot' in to) await this.snapshotsOrFail().get(to.snapshot);
      e.sessions.clear();
      await this.provider.reset(e.sb, to);
      e.sessions.clear();
      const created = e.createdRef ?? e.ref;
      if (to !== undefined && 'ref' in to) {
        e.ref = to.ref;
        e.createdRef = created;
      } else if (to === undefined) {
        e.ref = created;
        delete e.createdRef;
      }
      if (to !== undefined && 'snapshot' in to) e.snapshot = to.snapshot;
      else delete e.snapshot;
      return this.info(e);
    });
  }

  snapshotsOrFail(): Snapshots {
    if (this.provider.snapshots === undefined) throw noSnapshots();
    return this.provider.snapshots;
  }

  /** A snapshot of the sandbox's current state (see runtime/snapshot.ts). */
  async snapshot(id: string, opts: { push?: boolean; tag?: string }): Promise<SnapshotRecord> {
    const snaps = this.snapshotsOrFail();
    return this.use(id, (e) => snaps.take(e.sb, opts));
  }

  /** A new sandbox from a snapshot of this node. */
  async createFromSnapshot(snapshot: string, opts: OpenOptions, ttlMs: number | undefined): Promise<Entry> {
    const snaps = this.snapshotsOrFail();
    const record = await snaps.get(snapshot);
    this.reserve();
    try {
      const sb = await snaps.open(snapshot, this.niced(opts));
      if (this.closed) {
        await sb.destroy();
        throw new MinisandboxError('SANDBOX_DESTROYED', 'the server shut down while the sandbox started', { hint: 'retry against a running server' });
      }
      const e = this.register(sb, record.parentRef ?? `snapshots/${snapshot}`, Math.min(ttlMs ?? this.opts.ttlMs, this.opts.ttlMs));
      e.snapshot = snapshot;
      return e;
    } finally {
      this.pending--;
    }
  }

  newSessionId(): string {
    return `ses-${randomBytes(6).toString('hex')}`;
  }

  /** Ends sandboxes past their TTL, or idle (no request, nothing running) longer than the idle timeout. */
  async reap(now = Date.now()): Promise<void> {
    const due: Array<[Entry, 'ttl' | 'idle']> = [];
    for (const [id, e] of this.entries) {
      if (now >= e.expiresAt) due.push([e, 'ttl']);
      else if (e.busy === 0 && now - e.lastUsed >= this.opts.idleMs) due.push([e, 'idle']);
      else if (!e.sb.alive) {
        // its holder died: nothing to destroy, but why it ended is still the answer for it
        this.entries.delete(id);
        const why = e.sb.lostBecause;
        if (why !== undefined && e.internal !== true) this.rememberLost(id, why);
      }
    }
    await Promise.all(
      due.map(async ([e, why]) => {
        this.entries.delete(e.sb.id);
        this.opts.onReaped?.(e.sb.id, why);
        await e.sb.destroy();
      }),
    );
  }

  /** The last LOST_KEPT sandboxes that ended by themselves, and why: a client asking for one is told. */
  private rememberLost(id: string, why: string): void {
    this.lost.set(id, why);
    for (const old of this.lost.keys()) {
      if (this.lost.size <= LOST_KEPT) break;
      this.lost.delete(old);
    }
  }

  /** Destroys every sandbox and refuses new ones (SIGTERM, tests' afterAll). */
  async shutdown(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((e) => e.sb.destroy()));
  }
}
