/**
 * The sandboxes one server holds: creation under a cap, lookup, per-sandbox sessions, TTL and idle
 * expiry (one reaper timer), fork child by child, and destroy-all on shutdown. All of it lives in
 * one object per server so that nothing is global and tests can run several.
 */
import { randomBytes } from 'node:crypto';
import { MinisandboxError, NotFoundError } from '../errors.js';
import type { OpenOptions } from '../runtime/open.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { Session } from '../sandbox/session.js';
import { ServerMetrics } from './metrics.js';

/** How sandboxes are made: from the store and registry in production (see serve.ts), anything in tests. */
export interface SandboxProvider {
  open(ref: string, opts: OpenOptions): Promise<Sandbox>;
  /** One new child of the sandbox's current state. */
  forkOne(sb: Sandbox): Promise<Sandbox>;
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
}

export class CapacityError extends MinisandboxError {
  constructor(
    max: number,
    readonly retryAfterS: number,
  ) {
    super('CAPACITY', `this server already holds its maximum of ${max} sandboxes`, {
      hint: `delete sandboxes you are done with, or retry after ${retryAfterS} s; --max-sandboxes raises the cap`,
    });
  }
}

export interface Entry {
  sb: Sandbox;
  ref: string;
  createdAt: number;
  expiresAt: number;
  lastUsed: number;
  /** Requests in flight on it: a sandbox running a command is never idle. */
  busy: number;
  sessions: Map<string, Session>;
  forkedFrom?: string;
}

export interface SandboxInfo {
  id: string;
  ref: string;
  created_at: string;
  expires_at: string;
  idle_since: string | null;
  sessions: string[];
  forked_from?: string;
}

export class SandboxManager {
  readonly metrics = new ServerMetrics();
  private readonly entries = new Map<string, Entry>();
  /** Sandboxes also known by a name (the SWE-ReX face's `inst:` keys): the id, or its create in flight. */
  private readonly names = new Map<string, string | Promise<Entry>>();
  /** Creates in progress hold a slot, so a burst cannot overshoot the cap. */
  private pending = 0;
  private readonly timer: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly provider: SandboxProvider,
    readonly opts: ManagerOptions,
  ) {
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

  private register(sb: Sandbox, ref: string, ttlMs: number, forkedFrom?: string): Entry {
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
    };
    this.entries.set(sb.id, e);
    this.metrics.createsTotal++;
    return e;
  }

  async create(ref: string, opts: OpenOptions, ttlMs: number | undefined): Promise<Entry> {
    this.reserve();
    try {
      const sb = await this.provider.open(ref, opts);
      if (this.closed) {
        await sb.destroy();
        throw new MinisandboxError('SANDBOX_DESTROYED', 'the server shut down while the sandbox started', { hint: 'retry against a running server' });
      }
      return this.register(sb, ref, Math.min(ttlMs ?? this.opts.ttlMs, this.opts.ttlMs));
    } finally {
      this.pending--;
    }
  }

  /** Looking a sandbox up is not using it: a client polling its status does not keep it alive. */
  get(id: string): Entry {
    const e = this.entries.get(id);
    if (e === undefined || !e.sb.alive)
      throw new NotFoundError(`sandbox ${id}`, 'list live sandboxes with GET /v1/sandboxes; it may have passed its TTL or idle timeout');
    return e;
  }

  /** Runs `fn` with the sandbox marked busy, so the idle reaper leaves it alone meanwhile. */
  async use<T>(id: string, fn: (e: Entry) => Promise<T>): Promise<T> {
    const e = this.get(id);
    e.lastUsed = Date.now();
    e.busy++;
    try {
      return await fn(e);
    } finally {
      e.busy--;
      e.lastUsed = Date.now();
    }
  }

  list(): SandboxInfo[] {
    return [...this.entries.values()].map((e) => this.info(e));
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
    };
  }

  async destroy(id: string): Promise<void> {
    const e = this.entries.get(id);
    if (e === undefined) throw new NotFoundError(`sandbox ${id}`, 'list live sandboxes with GET /v1/sandboxes');
    this.entries.delete(id);
    await e.sb.destroy();
  }

  /** Children one by one, so each is reported on its own: a failed child does not undo the others. */
  async fork(id: string, count: number): Promise<Array<{ id: string } | { error: { code: string; message: string } }>> {
    return this.use(id, async (parent) => {
      const out: Array<{ id: string } | { error: { code: string; message: string } }> = [];
      for (let i = 0; i < count; i++) {
        try {
          this.reserve();
          try {
            const child = await this.provider.forkOne(parent.sb);
            this.register(child, parent.ref, Math.max(1, parent.expiresAt - Date.now()), parent.sb.id);
            out.push({ id: child.id });
          } finally {
            this.pending--;
          }
        } catch (e) {
          const code = e instanceof MinisandboxError ? e.code : 'SANDBOX_START';
          this.metrics.error(code);
          out.push({ error: { code, message: e instanceof Error ? e.message : String(e) } });
        }
      }
      return out;
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

  newSessionId(): string {
    return `ses-${randomBytes(6).toString('hex')}`;
  }

  /** Ends sandboxes past their TTL, or idle (no request, nothing running) longer than the idle timeout. */
  async reap(now = Date.now()): Promise<void> {
    const due: Array<[Entry, 'ttl' | 'idle']> = [];
    for (const [id, e] of this.entries) {
      if (now >= e.expiresAt) due.push([e, 'ttl']);
      else if (e.busy === 0 && now - e.lastUsed >= this.opts.idleMs) due.push([e, 'idle']);
      else if (!e.sb.alive) this.entries.delete(id); // its holder died: nothing to destroy
    }
    await Promise.all(
      due.map(async ([e, why]) => {
        this.entries.delete(e.sb.id);
        this.opts.onReaped?.(e.sb.id, why);
        await e.sb.destroy();
      }),
    );
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
