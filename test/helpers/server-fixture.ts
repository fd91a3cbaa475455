/**
 * A sandbox server for tests: a temporary registry holding a busybox environment (`srv/busybox`),
 * a temporary store, servers on 127.0.0.1 (random ports) over them, and `call` for real HTTP.
 */
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { populateBusyboxRoot } from '../../src/recipe/base-rootfs.js';
import { pushTree } from '../../src/publish/push.js';
import { LocalRegistry } from '../../src/registry/local.js';
import type { Registry } from '../../src/registry/registry.js';
import { buildApp } from '../../src/server/app.js';
import { SandboxManager } from '../../src/server/manager.js';
import type { MemoryLimits } from '../../src/server/memory-limits.js';
import { type RunningServer, type ServeOptions, startServer, storeProvider } from '../../src/server/serve.js';
import { StorePaths } from '../../src/store/paths.js';

export interface Res {
  status: number;
  headers: Headers;
  json: () => Record<string, unknown>;
  text: string;
  bytes: Buffer;
}

export interface CallOptions {
  server?: RunningServer;
  headers?: Record<string, string>;
  raw?: string | Buffer;
  signal?: AbortSignal;
}

export class ServerFixture {
  readonly work = mkdtempSync(join(tmpdir(), 'ms-serve-'));
  readonly reg: LocalRegistry;
  readonly store: StorePaths;
  readonly logLines: string[] = [];
  private readonly servers: RunningServer[] = [];
  srv!: RunningServer;
  token = '';

  constructor() {
    chmodSync(this.work, 0o755); // the sandbox's subordinate ids must reach the store below it
    this.reg = new LocalRegistry(join(this.work, 'registry'));
    this.store = new StorePaths(join(this.work, 'store'));
  }

  /** Pushes `srv/busybox` and starts the default server. */
  async setUp(): Promise<void> {
    await this.pushBusybox(this.reg, 'srv/busybox');
    this.srv = await this.serve();
    this.token = readFileSync(join(this.work, 'token'), 'utf8').trim();
  }

  /** A busybox environment under `tag`, with `extra` files (relative path -> content) added, then changed by `mutate`. */
  async pushBusybox(reg: Registry, tag: string, extra: Record<string, string> = {}, mutate?: (root: string) => void): Promise<void> {
    const base = join(this.work, 'rootfs');
    const root = join(this.work, `rootfs-${tag.replace(/[^a-z0-9]/gi, '_')}`);
    try {
      readFileSync(join(base, 'bin', 'busybox'));
    } catch {
      await populateBusyboxRoot('/bin/busybox', base);
    }
    cpSync(base, root, { recursive: true, verbatimSymlinks: true });
    for (const [p, content] of Object.entries(extra)) writeFileSync(join(root, p), content);
    mutate?.(root);
    await pushTree(reg, new StorePaths(join(this.work, 'push')), root, { tag, config: { env: { GREETING: 'hello' }, workdir: '/root' } });
  }

  async serve(
    opts: {
      maxSandboxes?: number;
      idleTimeoutMs?: number;
      ttlMs?: number;
      reg?: Registry;
      store?: StorePaths;
      maxJobsPerSandbox?: number;
      jobOutputBudgetBytes?: number;
      allowMounts?: string[];
      memoryBudgetBytes?: number;
      maxOutputBytes?: number;
      /** Any other of startServer's options (node name, prefetch). */
      more?: Partial<ServeOptions>;
    } = {},
  ): Promise<RunningServer> {
    const s = await startServer(
      opts.reg ?? this.reg,
      opts.store ?? this.store,
      {
        listen: { host: '127.0.0.1', port: 0 },
        tokenFile: join(this.work, 'token'),
        maxSandboxes: opts.maxSandboxes ?? 8,
        idleTimeoutMs: opts.idleTimeoutMs ?? 600_000,
        ttlMs: opts.ttlMs ?? 3_600_000,
        ...(opts.maxJobsPerSandbox === undefined ? {} : { maxJobsPerSandbox: opts.maxJobsPerSandbox }),
        ...(opts.jobOutputBudgetBytes === undefined ? {} : { jobOutputBudgetBytes: opts.jobOutputBudgetBytes }),
        ...(opts.allowMounts === undefined ? {} : { allowMounts: opts.allowMounts }),
        ...(opts.memoryBudgetBytes === undefined ? {} : { memoryBudgetBytes: opts.memoryBudgetBytes }),
        ...(opts.maxOutputBytes === undefined ? {} : { maxOutputBytes: opts.maxOutputBytes }),
        ...opts.more,
      },
      (l) => void this.logLines.push(l),
    );
    this.servers.push(s);
    return s;
  }

  /** A server over the fixture's registry and store with its own body limits (startServer takes none), and memory limits. */
  async serveWithLimits(limits: { fileLimit?: number; bodyLimit?: number; memory?: Partial<MemoryLimits> }): Promise<RunningServer> {
    const { memory, ...body } = limits;
    const manager = new SandboxManager(storeProvider(this.reg, this.store), {
      maxSandboxes: 8,
      ttlMs: 3_600_000,
      idleMs: 600_000,
      ...(memory === undefined ? {} : { memory }),
    });
    const app = buildApp(manager, { token: this.token, log: (l) => void this.logLines.push(l), reg: this.reg, store: this.store, ...body });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const addr = app.server.address();
    const s: RunningServer = {
      app,
      manager,
      url: `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`,
      tokenFile: join(this.work, 'token'),
      close: async () => {
        await manager.shutdown();
        await app.close();
      },
    };
    this.servers.push(s);
    return s;
  }

  async tearDown(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.close()));
    rmSync(this.work, { recursive: true, force: true });
  }

  async call(method: string, path: string, body?: unknown, o: CallOptions = {}): Promise<Res> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, ...(o.headers ?? {}) };
    let payload: string | Uint8Array<ArrayBuffer> | undefined;
    if (o.raw !== undefined) payload = typeof o.raw === 'string' ? o.raw : Uint8Array.from(o.raw);
    else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    const r = await fetch(`${(o.server ?? this.srv).url}${path}`, {
      method,
      headers,
      ...(payload === undefined ? {} : { body: payload }),
      ...(o.signal ? { signal: o.signal } : {}),
    });
    const bytes = Buffer.from(await r.arrayBuffer());
    const text = bytes.toString('utf8');
    return { status: r.status, headers: r.headers, text, bytes, json: () => JSON.parse(text) as Record<string, unknown> };
  }

  /** Creates a sandbox (201 expected) and returns its id. */
  async create(body: Record<string, unknown> = { ref: 'srv/busybox' }, server?: RunningServer): Promise<string> {
    const r = await this.call('POST', '/v1/sandboxes', body, server === undefined ? {} : { server });
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    return r.json().id as string;
  }
}
