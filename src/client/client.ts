/**
 * The client of one `minisandbox serve`: `Client` for the server, `RemoteSandbox` for one sandbox,
 * `RemoteSession` and `RemoteJob` for a persistent shell and a background command in it. Answers
 * are parsed with the server's own response schemas (server/response-schemas.ts), so a field the
 * server renames fails here, named, rather than as an undefined further on.
 */
import { z } from 'zod';
import { MinisandboxError } from '../errors.js';
import {
  CapacitySchema,
  DirListingSchema,
  EvaluationAnswerSchema,
  ForkResultSchema,
  HealthSchema,
  HoldsSchema,
  JobInfoSchema,
  JobStartedSchema,
  OutcomeBodySchema,
  PrefetchStatusSchema,
  PrewarmResultsSchema,
  SandboxInfoSchema,
  SnapshotSchema,
} from '../server/response-schemas.js';
import { NodeLostError, RemoteNotFoundError } from './errors.js';
import { type Answer, answerJson, resolveToken, Transport } from './transport.js';

export type SandboxInfo = z.infer<typeof SandboxInfoSchema>;
export type ExecResult = z.infer<typeof OutcomeBodySchema>;
export type Capacity = z.infer<typeof CapacitySchema>;
export type Health = z.infer<typeof HealthSchema>;
export type Holds = z.infer<typeof HoldsSchema>;
export type PrefetchStatus = z.infer<typeof PrefetchStatusSchema>;
export type JobInfo = z.infer<typeof JobInfoSchema>;
export type SnapshotInfo = z.infer<typeof SnapshotSchema>;
export type DirListing = z.infer<typeof DirListingSchema>;
export type PrewarmResults = z.infer<typeof PrewarmResultsSchema>;
export type EvaluationAnswer = z.infer<typeof EvaluationAnswerSchema>;

const SandboxListSchema = z.object({ sandboxes: z.array(SandboxInfoSchema) });
const SnapshotListSchema = z.object({ snapshots: z.array(SnapshotSchema) });
const JobListSchema = z.object({ jobs: z.array(JobInfoSchema) });
const SessionMadeSchema = z.object({ session: z.string() });

// a request waits this long beyond the command's own timeout before the client gives up on it
const MARGIN_MS = 60_000;

function timeoutFor(commandTimeoutS: number | undefined, defaultMs: number): number {
  return commandTimeoutS === undefined ? defaultMs : Math.max(defaultMs, commandTimeoutS * 1000 + MARGIN_MS);
}

function parsed<S extends z.ZodType>(schema: S, a: Answer, what: string): z.output<S> {
  const r = schema.safeParse(answerJson(a));
  if (!r.success)
    throw new MinisandboxError('INTERNAL', `the server's answer to ${what} is not what this client reads: ${r.error.issues[0]?.message ?? ''}`, {
      hint: 'the client and the server are of different versions: use the client of the server you run',
    });
  return r.data;
}

const seg = encodeURIComponent;

export interface Limits {
  cpus?: number;
  /** Bytes, or e.g. "512m". */
  memory?: number | string;
  pids?: number;
  disk?: number | string;
  nice?: number;
}

/** Exactly one source: `ref`, `dataset` + `instanceId`, or `snapshot` (a snapshot of this node). */
export interface CreateOptions {
  ref?: string;
  dataset?: string;
  instanceId?: string;
  snapshot?: string;
  limits?: Limits;
  network?: 'none' | 'host';
  env?: Record<string, string>;
  workdir?: string;
  /** Seconds, or e.g. "1h". */
  ttl?: number | string;
}

export interface RemoteExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds; a timeout is an outcome (`outcome: "timeout"`), not an error. */
  timeout?: number;
  maxOutput?: number | string;
}

export interface ClientOptions {
  /** Default $MINISANDBOX_URL, else http://127.0.0.1:7000. */
  baseUrl?: string;
  /** Default $MINISANDBOX_TOKEN, else the content of `tokenFile` / $MINISANDBOX_TOKEN_FILE. */
  token?: string;
  tokenFile?: string;
  /** A request's timeout when its command has none of its own (default 600 s). */
  timeoutMs?: number;
  /** A create answered 429 is retried after its Retry-After for up to this long. */
  retryOnCapacityMs?: number;
}

/** What a pool learns from its nodes' clients: the sandboxes made and deleted through them. */
export interface ClientHooks {
  transport?: Transport;
  onMade?: (sandboxId: string) => void;
  onGone?: (sandboxId: string) => void;
}

export class Client {
  readonly transport: Transport;
  private readonly hooks: ClientHooks;

  constructor(opts: ClientOptions = {}, hooks: ClientHooks = {}) {
    this.transport =
      hooks.transport ??
      new Transport(opts.baseUrl ?? process.env.MINISANDBOX_URL ?? 'http://127.0.0.1:7000', {
        token: resolveToken(opts.token, opts.tokenFile),
        timeoutMs: opts.timeoutMs ?? 600_000,
        retryOnCapacityMs: opts.retryOnCapacityMs ?? 0,
      });
    this.hooks = hooks;
  }

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  /** @internal a sandbox made through this client (a create or a fork's child) */
  made(id: string): void {
    this.hooks.onMade?.(id);
  }

  async health(): Promise<Health> {
    return parsed(HealthSchema, await this.transport.request('GET', '/v1/health'), 'GET /v1/health');
  }

  async capacity(): Promise<Capacity> {
    return parsed(CapacitySchema, await this.transport.request('GET', '/v1/capacity'), 'GET /v1/capacity');
  }

  /** Whether the node holds these environments laid out (or how many of their layers): `refs`, or instances of a dataset. */
  async holds(what: { refs: string[] } | { dataset: string; instanceIds: string[] }): Promise<Holds> {
    const body = 'refs' in what ? { refs: what.refs } : { dataset: what.dataset, instance_ids: what.instanceIds };
    return parsed(HoldsSchema, await this.transport.request('POST', '/v1/holds', { json: body }), 'POST /v1/holds');
  }

  /** Starts pulling `refs` or a dataset's environments in the background (each blob once); how it goes. */
  async prefetch(what: { refs: string[] } | { dataset: string; instanceIds?: string[] }, ioBudget?: number | string): Promise<PrefetchStatus> {
    const body = {
      ...('refs' in what ? { refs: what.refs } : { dataset: what.dataset, ...(what.instanceIds === undefined ? {} : { instance_ids: what.instanceIds }) }),
      ...(ioBudget === undefined ? {} : { io_budget: ioBudget }),
    };
    return parsed(PrefetchStatusSchema, await this.transport.request('POST', '/v1/prefetch', { json: body }), 'POST /v1/prefetch');
  }

  async prefetchStatus(): Promise<PrefetchStatus> {
    return parsed(PrefetchStatusSchema, await this.transport.request('GET', '/v1/prefetch'), 'GET /v1/prefetch');
  }

  /** Pulls and lays out environments now (the answer comes when they are there). */
  async prewarm(refs: string[]): Promise<PrewarmResults> {
    const a = await this.transport.request('POST', '/v1/prewarm', { json: { refs }, timeoutMs: timeoutFor(3600, this.transport.timeoutMs) });
    return parsed(PrewarmResultsSchema, a, 'POST /v1/prewarm');
  }

  /** A patch graded for a dataset instance in a fresh sandbox: SWE-bench's report, with `status`. */
  async evaluate(dataset: string, instanceId: string, patch: string | null, opts: { model?: string; runId?: string; timeout?: number | string } = {}) {
    const body = {
      dataset,
      instance_id: instanceId,
      patch,
      ...(opts.model === undefined ? {} : { model: opts.model }),
      ...(opts.runId === undefined ? {} : { run_id: opts.runId }),
      ...(opts.timeout === undefined ? {} : { timeout: opts.timeout }),
    };
    const a = await this.transport.request('POST', '/v1/evaluate', { json: body, timeoutMs: timeoutFor(3600, this.transport.timeoutMs) });
    return parsed(EvaluationAnswerSchema, a, 'POST /v1/evaluate');
  }

  /** A new sandbox from exactly one source; `await using` (or `delete()`) ends it. */
  async create(opts: CreateOptions): Promise<RemoteSandbox> {
    const body: Record<string, unknown> = {};
    const fields: [string, unknown][] = [
      ['ref', opts.ref],
      ['dataset', opts.dataset],
      ['instance_id', opts.instanceId],
      ['snapshot', opts.snapshot],
      ['limits', opts.limits],
      ['network', opts.network],
      ['env', opts.env],
      ['workdir', opts.workdir],
      ['ttl', opts.ttl],
    ];
    for (const [k, v] of fields) if (v !== undefined) body[k] = v;
    const a = await this.transport.request('POST', '/v1/sandboxes', { json: body, timeoutMs: timeoutFor(1800, this.transport.timeoutMs) });
    const info = parsed(SandboxInfoSchema, a, 'POST /v1/sandboxes');
    this.made(info.id);
    return new RemoteSandbox(this, info.id, info);
  }

  /** A handle on an existing sandbox, without a request. */
  sandbox(id: string): RemoteSandbox {
    return new RemoteSandbox(this, id);
  }

  /** A handle on an existing sandbox, looked up (RemoteNotFoundError if it is gone). */
  async get(id: string): Promise<RemoteSandbox> {
    return new RemoteSandbox(this, id, await this.info(id));
  }

  async info(id: string): Promise<SandboxInfo> {
    return parsed(SandboxInfoSchema, await this.transport.request('GET', `/v1/sandboxes/${seg(id)}`), 'GET /v1/sandboxes/:id');
  }

  async list(): Promise<SandboxInfo[]> {
    return parsed(SandboxListSchema, await this.transport.request('GET', '/v1/sandboxes'), 'GET /v1/sandboxes').sandboxes;
  }

  /** Deletes it; with `missingOk`, one already gone (or lost with its node) is no error. */
  async delete(id: string, opts: { missingOk?: boolean } = {}): Promise<void> {
    try {
      await this.transport.request('DELETE', `/v1/sandboxes/${seg(id)}`);
    } catch (e) {
      if (!(e instanceof RemoteNotFoundError || e instanceof NodeLostError)) throw e;
      this.hooks.onGone?.(id);
      if (opts.missingOk !== true) throw e;
      return;
    }
    this.hooks.onGone?.(id);
  }

  async snapshots(): Promise<SnapshotInfo[]> {
    return parsed(SnapshotListSchema, await this.transport.request('GET', '/v1/snapshots'), 'GET /v1/snapshots').snapshots;
  }

  async deleteSnapshot(snapshot: string): Promise<void> {
    await this.transport.request('DELETE', `/v1/snapshots/${seg(snapshot)}`);
  }
}

/** One child of a fork: its sandbox (and session), or why the server could not make it. */
export type ForkChild = { sandbox: RemoteSandbox; session: RemoteSession | undefined } | { error: { code: string; message: string } };

export class RemoteSandbox {
  readonly path: string;
  constructor(
    readonly client: Client,
    readonly id: string,
    readonly created?: SandboxInfo,
  ) {
    this.path = `/v1/sandboxes/${seg(id)}`;
  }

  private get t(): Transport {
    return this.client.transport;
  }

  async info(): Promise<SandboxInfo> {
    return this.client.info(this.id);
  }

  /** Whether it still exists (false too once its node is lost). */
  async isAlive(): Promise<boolean> {
    try {
      await this.info();
      return true;
    } catch (e) {
      if (e instanceof RemoteNotFoundError || e instanceof NodeLostError) return false;
      throw e;
    }
  }

  async delete(opts: { missingOk?: boolean } = {}): Promise<void> {
    await this.client.delete(this.id, opts);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete({ missingOk: true });
  }

  private static execBody(command: string | string[], o: RemoteExecOptions): Record<string, unknown> {
    return {
      ...(typeof command === 'string' ? { command } : { argv: command }),
      ...(o.cwd === undefined ? {} : { cwd: o.cwd }),
      ...(o.env === undefined ? {} : { env: o.env }),
      ...(o.timeout === undefined ? {} : { timeout: o.timeout }),
      ...(o.maxOutput === undefined ? {} : { max_output: o.maxOutput }),
    };
  }

  /** A shell string (`/bin/sh -c`) or an argv in a fresh process, waited for. */
  async exec(command: string | string[], opts: RemoteExecOptions = {}): Promise<ExecResult> {
    const a = await this.t.request('POST', `${this.path}/exec`, {
      json: RemoteSandbox.execBody(command, opts),
      timeoutMs: timeoutFor(opts.timeout, this.t.timeoutMs),
    });
    return parsed(OutcomeBodySchema, a, 'POST /v1/sandboxes/:id/exec');
  }

  /** Starts a command as a job and returns at once; `job.wait()` gets its result. */
  async execAsync(command: string | string[], opts: RemoteExecOptions = {}): Promise<RemoteJob> {
    const a = await this.t.request('POST', `${this.path}/exec`, { query: { async: true }, json: RemoteSandbox.execBody(command, opts) });
    return new RemoteJob(this, parsed(JobStartedSchema, a, 'POST /v1/sandboxes/:id/exec?async=true').job);
  }

  job(id: string): RemoteJob {
    return new RemoteJob(this, id);
  }

  async jobs(): Promise<JobInfo[]> {
    return parsed(JobListSchema, await this.t.request('GET', `${this.path}/jobs`), 'GET /v1/sandboxes/:id/jobs').jobs;
  }

  /** A persistent shell: cwd, exported variables and activated venvs carry over between runs. */
  async session(startup: string[] = []): Promise<RemoteSession> {
    const a = await this.t.request('POST', `${this.path}/sessions`, { json: { startup } });
    return new RemoteSession(this, parsed(SessionMadeSchema, a, 'POST /v1/sandboxes/:id/sessions').session);
  }

  async readFile(path: string): Promise<Buffer> {
    return (await this.t.request('GET', `${this.path}/files`, { query: { path } })).body;
  }

  async readText(path: string): Promise<string> {
    return (await this.readFile(path)).toString('utf8');
  }

  /** Writes the file (parent directories made); `mode` e.g. 0o755. */
  async writeFile(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<void> {
    const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const query = { path, ...(opts.mode === undefined ? {} : { mode: (opts.mode & 0o7777).toString(8).padStart(3, '0') }) };
    await this.t.request('PUT', `${this.path}/files`, { query, body, contentType: 'application/octet-stream' });
  }

  async listFiles(path: string): Promise<DirListing['entries']> {
    return parsed(DirListingSchema, await this.t.request('GET', `${this.path}/files/list`, { query: { path } }), 'GET .../files/list').entries;
  }

  /** The repository's changes against its base commit, as a patch. */
  async diff(opts: { workdir?: string; base?: string } = {}): Promise<string> {
    return (await this.t.request('GET', `${this.path}/diff`, { query: { workdir: opts.workdir, base: opts.base } })).body.toString('utf8');
  }

  /** `count` independent children of the current state, each reported on its own. */
  async fork(count: number, opts: { session?: string | RemoteSession } = {}): Promise<ForkChild[]> {
    const session = typeof opts.session === 'string' ? opts.session : opts.session?.id;
    const a = await this.t.request('POST', `${this.path}/fork`, {
      json: { count, ...(session === undefined ? {} : { session }) },
      timeoutMs: timeoutFor(600, this.t.timeoutMs),
    });
    return parsed(ForkResultSchema, a, 'POST /v1/sandboxes/:id/fork').children.map((c): ForkChild => {
      if ('error' in c) return { error: c.error };
      this.client.made(c.id);
      const sb = new RemoteSandbox(this.client, c.id);
      return { sandbox: sb, session: c.session === undefined ? undefined : new RemoteSession(sb, c.session) };
    });
  }

  /** Freezes the writable layer into a snapshot of this node; `push: true` publishes it to the registry under `tag`. */
  async snapshot(opts: { push?: boolean; tag?: string } = {}): Promise<SnapshotInfo> {
    const body = { ...(opts.push === true ? { push: true } : {}), ...(opts.tag === undefined ? {} : { tag: opts.tag }) };
    const a = await this.t.request('POST', `${this.path}/snapshot`, { json: body, timeoutMs: timeoutFor(1800, this.t.timeoutMs) });
    return parsed(SnapshotSchema, a, 'POST /v1/sandboxes/:id/snapshot');
  }

  /** Back to the creation state, or to a snapshot of this node, or over an environment of the registry (`ref`); same id. */
  async reset(opts: { snapshot?: string; ref?: string } = {}): Promise<SandboxInfo> {
    const body = { ...(opts.snapshot === undefined ? {} : { snapshot: opts.snapshot }), ...(opts.ref === undefined ? {} : { ref: opts.ref }) };
    const a = await this.t.request('POST', `${this.path}/reset`, { json: body, timeoutMs: timeoutFor(1800, this.t.timeoutMs) });
    return parsed(SandboxInfoSchema, a, 'POST /v1/sandboxes/:id/reset');
  }
}

export class RemoteSession {
  private readonly path: string;
  constructor(
    readonly sandbox: RemoteSandbox,
    readonly id: string,
  ) {
    this.path = `${sandbox.path}/sessions/${seg(id)}`;
  }

  /** Runs in the shell; a timeout interrupts the command and keeps the shell and its state. */
  async run(command: string, opts: { timeout?: number; maxOutput?: number | string } = {}): Promise<ExecResult> {
    const t = this.sandbox.client.transport;
    const body = {
      command,
      ...(opts.timeout === undefined ? {} : { timeout: opts.timeout }),
      ...(opts.maxOutput === undefined ? {} : { max_output: opts.maxOutput }),
    };
    return parsed(
      OutcomeBodySchema,
      await t.request('POST', `${this.path}/run`, { json: body, timeoutMs: timeoutFor(opts.timeout, t.timeoutMs) }),
      'session run',
    );
  }

  /** Ctrl-C for the running command; the shell stays. */
  async interrupt(): Promise<void> {
    await this.sandbox.client.transport.request('POST', `${this.path}/interrupt`);
  }

  async close(): Promise<void> {
    await this.sandbox.client.transport.request('DELETE', this.path);
  }
}

export class RemoteJob {
  private readonly path: string;
  constructor(
    readonly sandbox: RemoteSandbox,
    readonly id: string,
  ) {
    this.path = `${sandbox.path}/jobs/${seg(id)}`;
  }

  /** Its state; with `waitS` (at most 300) the server holds the answer until it ends or the wait passes. */
  async status(waitS = 0): Promise<JobInfo> {
    const t = this.sandbox.client.transport;
    const wait = waitS > 0 ? Math.min(300, Math.ceil(waitS)) : undefined;
    const a = await t.request('GET', this.path, { query: { wait }, timeoutMs: timeoutFor(wait, t.timeoutMs) });
    return parsed(JobInfoSchema, a, 'GET .../jobs/:job');
  }

  /** Its result once it ends (long-polling in steps of at most 300 s). */
  async wait(): Promise<ExecResult> {
    for (;;) {
      const info = await this.status(300);
      if (info.status === 'done' && info.result !== undefined) return info.result;
    }
  }

  async kill(): Promise<void> {
    await this.sandbox.client.transport.request('DELETE', this.path);
  }
}
