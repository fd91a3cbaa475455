/**
 * `minisandbox serve`: one long-lived process per node over its store and the configured registry.
 * Sandboxes are opened from refs (pulled on demand, leased) and forked through the runtime; what a
 * crashed predecessor left (sandboxes, work dirs and upload spools, half-made snapshots) is reaped
 * at start; SIGTERM/SIGINT destroy every sandbox before exit.
 */
import { parseAllowMount } from './mount-policy.js';
import { resolve } from 'node:path';
import { isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import { forkShared, layOutEnv, openSandbox, reapStale, resetLeased } from '../runtime/open.js';
import { GitStatCache } from '../runtime/git-stat-cache.js';
import { Snapshots } from '../runtime/snapshot.js';
import { type HostInfo, probeHost } from '../sandbox/host.js';
import { removeDeadLeftovers } from '../store/leftovers.js';
import type { StorePaths } from '../store/paths.js';
import { buildApp } from './app.js';
import { type EvalDatasetSource, loadEvalDatasets } from './eval-datasets.js';
import { batchedLines } from './log-sink.js';
import { DEFAULT_SANDBOX_NICE } from './sandbox-nice.js';
import { isErrno } from '../util/fs.js';
import { loadToken } from './token-file.js';
import { type SandboxProvider, SandboxManager } from './manager.js';
import { NodePrefetch, prefetchDatasetRefs } from './node-prefetch.js';
import { type NodeIdentity, nodeName } from './node-identity.js';

export interface ServeOptions {
  listen: { host: string; port: number };
  tokenFile?: string;
  /** The token itself ($MINISANDBOX_TOKEN), where no --token-file is given. */
  token?: string;
  maxSandboxes: number;
  idleTimeoutMs: number;
  ttlMs: number;
  /** Datasets POST /v1/evaluate grades against (loaded at start: a bad file stops the start). */
  evalDatasets?: EvalDatasetSource[];
  /** Async exec jobs running at once per sandbox (default DEFAULT_JOB_LIMITS). */
  maxJobsPerSandbox?: number;
  /** Output bytes of finished jobs kept per sandbox (default DEFAULT_JOB_LIMITS). */
  jobOutputBudgetBytes?: number;
  /** Niceness of sandboxes whose create gives none (default DEFAULT_SANDBOX_NICE). */
  sandboxNice?: number;
  /** Bytes requests may hold in memory at once (default DEFAULT_MEMORY_LIMITS; see MemoryLimits). */
  memoryBudgetBytes?: number;
  /** The largest max_output a request may ask for (default DEFAULT_MEMORY_LIMITS). */
  maxOutputBytes?: number;
  /** Where evaluate records runs (`score`'s --report-dir); default logs/run_evaluation under the cwd, as `score`. */
  reportsDir?: string;
  /** `--allow-mount DIR[:rw]` values: host dirs creates may mount from (none by default). */
  allowMounts?: readonly string[];
  /** The node's name (`--node-name`; else $MINISANDBOX_NODE_NAME, else the host name): its sandbox ids end in `.<name>`. */
  nodeName?: string;
  /** Datasets (`[NAME=]FILE`) whose environments are prefetched in the background from the start. */
  prefetchDatasets?: string[];
  /** Compressed bytes that start-up prefetch fetches at once (default 512 MiB). */
  prefetchIoBudget?: number;
  /** /v1/health says ready=false (and `?ready=1` answers 503) until the start-up prefetch ended. */
  readyAfterPrefetch?: boolean;
  /** The version /v1/health reports. */
  version?: string;
}

/** `host:port`, `[::1]:port` or `:port` (loopback). */
export function parseListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s.trim());
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || port > 65535)
    throw new InvalidInputError(`--listen ${s}: not host:port`, 'e.g. 127.0.0.1:7000, [::1]:7000 or 0.0.0.0:7000 (with --token-file)');
  const host = m[1] ?? (m[2] === '' ? '127.0.0.1' : m[2]!);
  return { host, port };
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

export function storeProvider(reg: Registry, store: StorePaths): SandboxProvider {
  // The host is probed once per server, not per create (dozens of file-system calls each time); a
  // failed probe is retried by the next create. A changed host (new subordinate ranges) needs a restart.
  let host: Promise<HostInfo> | undefined;
  const probe = (): Promise<HostInfo> =>
    (host ??= probeHost().catch((e: unknown) => {
      host = undefined;
      throw e;
    }));
  // what each environment's git indexes need to hold for the sandbox's stat cache (runtime/git-stat-cache.ts)
  const gitStatCache = new GitStatCache();
  const snapshots = new Snapshots(store, reg, { gitStatCache });
  return {
    open: async (ref, opts) => openSandbox(reg, store, ref, { ...opts, host: await probe(), gitStatCache }),
    fork: (sb, n) => forkShared(store, sb, n),
    reset: async (sb, to) =>
      resetLeased(
        store,
        sb,
        to === undefined ? undefined : 'snapshot' in to ? await snapshots.layout(to.snapshot) : await layOutEnv(reg, store, to.ref, await probe()),
        gitStatCache,
      ),
    snapshots,
  };
}

export interface RunningServer {
  app: FastifyInstance;
  manager: SandboxManager;
  url: string;
  /** Where the token is; null when it came from $MINISANDBOX_TOKEN. */
  tokenFile: string | null;
  /** Destroys every sandbox and stops listening. */
  close(): Promise<void>;
}

/** Why the server could not listen, said as what to do: a raw EADDRINUSE names neither port nor fix. */
function listenError(e: unknown, at: { host: string; port: number }): unknown {
  const where = `${at.host.includes(':') ? `[${at.host}]` : at.host}:${at.port}`;
  if (isErrno(e, 'EADDRINUSE'))
    return new InvalidInputError(
      `cannot listen on ${where}: another process listens there`,
      `stop it (\`ss -ltnp 'sport = :${at.port}'\` names it) or pick another --listen`,
    );
  if (isErrno(e, 'EADDRNOTAVAIL'))
    return new InvalidInputError(
      `cannot listen on ${where}: no interface of this host has that address`,
      'listen on 127.0.0.1, 0.0.0.0 or an address of this host',
    );
  if (isErrno(e, 'EACCES'))
    return new InvalidInputError(`cannot listen on ${where}: ports below 1024 need root`, 'pick a port of 1024 or more, e.g. --listen 127.0.0.1:7000');
  return e;
}

export async function startServer(reg: Registry, store: StorePaths, o: ServeOptions, log?: (line: string) => void): Promise<RunningServer> {
  if (!isLoopback(o.listen.host) && o.tokenFile === undefined && o.token === undefined) {
    throw new MinisandboxError('USAGE', `refusing to listen on ${o.listen.host} without --token-file or $MINISANDBOX_TOKEN`, {
      hint: 'pass --token-file, or set $MINISANDBOX_TOKEN, to a token every client knows; or listen on 127.0.0.1',
    });
  }
  // a bad dir stops the start, before anything is reaped or listened on
  const allowMounts = (o.allowMounts ?? []).map(parseAllowMount);
  const node: NodeIdentity = { name: nodeName(o.nodeName), startedAt: Date.now() };
  const datasets = await loadEvalDatasets(o.evalDatasets ?? []);
  // read before anything starts: a bad dataset file stops the start, as a bad eval dataset does
  const prefetchRefs = (await Promise.all((o.prefetchDatasets ?? []).map(prefetchDatasetRefs))).flat();
  const { token, file } = loadToken(o.tokenFile, store.root, o.token);
  // what a killed predecessor left: its sandboxes, its work dirs and spools, its half-made snapshots
  await reapStale(store);
  await removeDeadLeftovers(store);
  const provider = storeProvider(reg, store);
  await provider.snapshots?.reapUnfinished();
  const sink = log === undefined ? batchedLines((text) => void process.stderr.write(text)) : undefined;
  const write = log ?? sink!.write;
  const manager = new SandboxManager(provider, {
    maxSandboxes: o.maxSandboxes,
    ttlMs: o.ttlMs,
    idleMs: o.idleTimeoutMs,
    sandboxNice: o.sandboxNice ?? DEFAULT_SANDBOX_NICE,
    node,
    onReaped: (id, why) => write(JSON.stringify({ time: new Date().toISOString(), event: 'reaped', sandbox: id, why })),
    jobs: {
      ...(o.maxJobsPerSandbox === undefined ? {} : { maxRunning: o.maxJobsPerSandbox }),
      ...(o.jobOutputBudgetBytes === undefined ? {} : { outputBudgetBytes: o.jobOutputBudgetBytes }),
    },
    memory: {
      ...(o.memoryBudgetBytes === undefined ? {} : { budgetBytes: o.memoryBudgetBytes }),
      ...(o.maxOutputBytes === undefined ? {} : { maxOutputBytes: o.maxOutputBytes }),
    },
  });
  // not ready until the start-up prefetch ended, where asked to (see ServeOptions.readyAfterPrefetch)
  let warming = o.readyAfterPrefetch === true && prefetchRefs.length > 0;
  const prefetch = new NodePrefetch(reg, store, (event) => write(JSON.stringify({ time: new Date().toISOString(), ...event })));
  const app = buildApp(manager, {
    token,
    log: write,
    reg,
    store,
    allowMounts,
    prefetch,
    ready: () => !warming,
    ...(o.version === undefined ? {} : { version: o.version }),
    evaluate: { datasets, reportsDir: resolve(o.reportsDir ?? 'logs/run_evaluation') },
  });
  try {
    await app.listen({ host: o.listen.host, port: o.listen.port });
  } catch (e) {
    await manager.shutdown();
    await app.close();
    throw listenError(e, o.listen);
  }
  // after the listen: probes answer (not ready) while it runs
  if (prefetchRefs.length > 0) {
    prefetch.start(prefetchRefs, o.prefetchIoBudget);
    void prefetch.ended().then(() => (warming = false));
  }
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr !== null ? addr.port : o.listen.port;
  const host = o.listen.host.includes(':') ? `[${o.listen.host}]` : o.listen.host;
  let closing: Promise<void> | undefined;
  return {
    app,
    manager,
    url: `http://${host}:${port}`,
    tokenFile: file,
    close: () =>
      (closing ??= (async () => {
        await prefetch.close();
        await manager.shutdown();
        await app.close();
        sink?.flush();
      })()),
  };
}
