/**
 * Runs a build plan: every node in dependency order, at most `jobs` at once. A node whose cache key
 * is already in the registry is not rebuilt (unless forced); a failing node marks its dependents
 * skipped and, with keepGoing, the rest go on. Nothing partial is ever published, so a rerun after
 * a crash or Ctrl-C skips what finished and redoes the rest. A node that another process is
 * building in the same store is waited for (a lock per node key in the store) and then found
 * cached, never built twice; each build writes a log of its own.
 */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { errorMessage } from '../errors.js';
import type { RuntimeConfig } from '../layer/env.js';
import { cacheRefName } from '../recipe/key.js';
import type { Registry } from '../registry/registry.js';
import type { StorePaths } from '../store/paths.js';
import { withLock } from '../store/lock.js';
import { digestHex } from '../cas/digest.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { BuildCommandError, type Parent, buildBase, buildEnv, buildHistory, buildInstance } from './build-node.js';
import { type BuildPlan, type PlanNode, nodeKey } from './plan.js';
import { type NodeOutcome, runGraph, scheduleNodes } from './plan-schedule.js';
import { CatalogCache } from './catalog-cache.js';
import { Discarder, type DiscardMode } from './discard.js';
import { formatPhases, PhaseClock, type PhaseTimes } from './phases.js';
import { availableMemory, ramUpperBytes } from './upper.js';
import { type HostNetworkSettings, hostNetworkSettings } from './host-network.js';

export interface BuildOptions {
  registry: Registry;
  store: StorePaths;
  logDir: string;
  jobs: number;
  keepGoing: boolean;
  force: boolean;
  timeoutMs: number;
  onEvent?: (e: BuildEvent) => void;
  signal?: AbortSignal;
  /**
   * How finished build sandboxes' upper dirs are deleted (see discard.ts): `wait` (default) in
   * the background of this process, done before executePlan returns; `detach` by a detached
   * process that may outlive it.
   */
  discard?: DiscardMode;
  /**
   * Size cap of each build sandbox's upper in RAM (0: uppers on disk). Default: a share of the
   * memory available now, divided by `jobs` (see upper.ts).
   */
  ramUpperBytes?: number;
  /**
   * The host's proxy and CA settings for build sandboxes with network (see host-network.ts).
   * Default: read from this process's environment; null: none.
   */
  hostNetwork?: HostNetworkSettings | null;
}

export type BuildEvent =
  | { type: 'start'; node: PlanNode; running: number; log: string }
  /** A phase of the node's build began (see phases.ts): `commands`, `push-capture`, ... */
  | { type: 'phase'; node: PlanNode; phase: string }
  /** Its layer's capture has read this much so far (distinct contents, uncompressed). */
  | { type: 'captured'; node: PlanNode; files: number; bytes: number }
  /** Another process is building the same node in this store: this one waits for it. */
  | { type: 'wait'; node: PlanNode; holder: number | undefined }
  | { type: 'retry'; node: PlanNode; attempt: number; error: string }
  | { type: 'done'; node: PlanNode; row: SummaryRow; done: number; total: number };

export interface SummaryRow {
  id: string;
  kind: string;
  label: string;
  /** `interrupted`: stopped by the caller's signal (Ctrl-C) while it ran; nothing was published, a rerun builds it. */
  status: 'built' | 'cached' | 'failed' | 'interrupted' | 'skipped' | 'cancelled';
  durationMs: number;
  env?: Digest;
  tag?: string;
  log?: string;
  error?: string;
  /** Wall-clock milliseconds per phase of the (last) attempt; see phases.ts. */
  phasesMs?: PhaseTimes;
}

interface Built {
  env: Digest;
  cached: boolean;
  log: string;
  phases: PhaseTimes;
}

function logName(n: PlanNode): string {
  return `${n.kind}-${n.label.replace(/[^A-Za-z0-9._-]/g, '_')}-${n.id.split(':')[1]?.slice(0, 8) ?? ''}.log`;
}

function runtimeConfig(n: PlanNode): Partial<RuntimeConfig> {
  if (n.test === null) return {};
  return {
    workdir: n.test.workdir,
    testCmd: n.test.testCmd,
    labels: { instanceId: n.label, logParser: n.test.logParser, ...Object.fromEntries(Object.entries(n.test.evalEnv).map(([k, v]) => [`evalEnv.${k}`, v])) },
  };
}

export async function executePlan(plan: BuildPlan, opts: BuildOptions): Promise<SummaryRow[]> {
  const byId = new Map(plan.nodes.map((n) => [n.id, n]));
  const results = new Map<string, Built>();
  const rows: SummaryRow[] = [];
  let done = 0;
  const discard = new Discarder(opts.store.tmpDir, opts.discard ?? 'wait');
  const catalog = new CatalogCache(opts.registry, opts.store);
  const ramUpper = opts.ramUpperBytes ?? ramUpperBytes(opts.jobs, availableMemory());
  const hostNetwork = opts.hostNetwork === undefined ? await hostNetworkSettings() : opts.hostNetwork;

  const parentOf = async (n: PlanNode): Promise<Parent | null> => {
    if (n.parent !== null) {
      const built = results.get(n.parent);
      if (built === undefined) throw new Error(`internal: parent ${n.parent} of ${n.id} not built`);
      return resolveEnv(opts.registry, built.env);
    }
    if (n.parentRef !== null) return resolveEnv(opts.registry, n.parentRef);
    return null;
  };

  /** Nodes whose log this run has begun: a retry appends to it, a new run starts it afresh. */
  const logStarted = new Set<string>();
  const build = async (n: PlanNode, signal: AbortSignal): Promise<Built> => {
    const clock = new PhaseClock((phase) => opts.onEvent?.({ type: 'phase', node: n, phase }));
    const parent = await clock.time('parent-resolve', () => parentOf(n));
    const key = nodeKey(n, parent?.config.layers.map((l) => l.digest) ?? []);
    const cacheRef = cacheRefName(n.kind, key);
    const log = join(opts.logDir, logName(n));
    let cached = opts.force ? null : await clock.time('cache-lookup', () => opts.registry.getRef(cacheRef));
    let made: Digest;
    if (cached !== null) made = cached;
    else {
      // one build of a node at a time in this store: a second waits, then finds the first's layer
      const forcedOver = opts.force ? await opts.registry.getRef(cacheRef) : null;
      await mkdir(opts.store.locksDir, { recursive: true });
      const builtMeanwhile = async (): Promise<boolean> => {
        const now = await opts.registry.getRef(cacheRef);
        return now !== null && now !== forcedOver;
      };
      const built = await withLock(
        join(opts.store.locksDir, `build-${n.kind}-${digestHex(key)}.lock`),
        builtMeanwhile,
        () => buildLocked(n, parent, cacheRef, log, clock, signal),
        1000,
        (holder) => opts.onEvent?.({ type: 'wait', node: n, holder }),
      );
      if (built !== null) made = built;
      else {
        cached = await opts.registry.getRef(cacheRef);
        if (cached === null) throw new Error(`internal: ${cacheRef} vanished after its build`);
        made = cached;
      }
    }
    if (n.tag !== null) await clock.time('tag', () => opts.registry.putRef(n.tag!, made));
    if (cached === null) {
      await mkdir(dirname(log), { recursive: true });
      await appendFile(log, `phases: ${formatPhases(clock.times)}\n`);
    }
    return { env: made, cached: cached !== null, log, phases: clock.times };
  };

  const buildLocked = async (n: PlanNode, parent: Parent | null, cacheRef: string, log: string, clock: PhaseClock, signal: AbortSignal): Promise<Digest> => {
    if (!logStarted.has(n.id)) {
      logStarted.add(n.id);
      await mkdir(dirname(log), { recursive: true });
      await writeFile(log, `build of ${n.kind} ${n.label} (${n.id}) by pid ${process.pid}, ${new Date().toISOString()}\n`);
    }
    try {
      const ctx = {
        registry: opts.registry,
        store: opts.store,
        logPath: log,
        timeoutMs: opts.timeoutMs,
        signal,
        clock,
        discard,
        catalog,
        ramUpperBytes: ramUpper,
        ...(hostNetwork === null ? {} : { hostNetwork }),
        onCaptured: (files: number, bytes: number) => opts.onEvent?.({ type: 'captured', node: n, files, bytes }),
      };
      const r = n.recipe;
      if (r.kind === 'base') return await buildBase(r, ctx, cacheRef, runtimeConfig(n));
      if (parent === null) throw new Error(`internal: ${n.id} has no parent`);
      if (r.kind === 'env') return await buildEnv(r, n.normalized, parent, ctx, cacheRef);
      if (r.kind === 'history') return await buildHistory(r, parent, ctx, cacheRef);
      return await buildInstance(r, parent, ctx, cacheRef, runtimeConfig(n));
    } catch (e) {
      if (opts.signal?.aborted === true)
        await appendFile(log, `--- interrupted (${errorMessage(opts.signal.reason)}): nothing published ---\n`).catch(() => undefined);
      throw e;
    }
  };

  const signal = opts.signal;
  const outcomes = await runGraph(
    scheduleNodes(plan.nodes),
    async (n, s) => {
      const merged = signal === undefined ? s : AbortSignal.any([s, signal]);
      const b = await build(n, merged);
      results.set(n.id, b);
      return b;
    },
    {
      jobs: opts.jobs,
      keepGoing: opts.keepGoing,
      ...(signal === undefined ? {} : { signal }),
      retry: { attempts: 3, backoffMs: 2000, retryable: (e) => e instanceof BuildCommandError && e.transient },
      onEvent: (e) => {
        const node = byId.get(e.id)!;
        if (e.type === 'start') opts.onEvent?.({ type: 'start', node, running: e.running, log: join(opts.logDir, logName(node)) });
        else if (e.type === 'retry') opts.onEvent?.({ type: 'retry', node, attempt: e.attempt, error: errorMessage(e.error) });
        else {
          done++;
          const row = toRow(node, e.outcome, join(opts.logDir, logName(node)), signal);
          opts.onEvent?.({ type: 'done', node, row, done, total: plan.nodes.length });
        }
      },
    },
  ).finally(() => discard.settle());
  for (const n of plan.nodes) {
    const o = outcomes.get(n.id);
    if (o !== undefined) rows.push(toRow(n, o, join(opts.logDir, logName(n)), signal));
  }
  return rows;
}

/** `signal`: the caller's; a node that failed once it was aborted was interrupted, not broken. */
function toRow(n: PlanNode, o: NodeOutcome<Built>, log: string, signal: AbortSignal | undefined): SummaryRow {
  const base = { id: n.id, kind: n.kind, label: n.label, ...(n.tag !== null ? { tag: n.tag } : {}) };
  switch (o.status) {
    case 'ok':
      return {
        ...base,
        status: o.value.cached ? 'cached' : 'built',
        durationMs: Math.round(o.ms),
        env: o.value.env,
        ...(o.value.cached ? {} : { log }),
        phasesMs: o.value.phases,
      };
    case 'failed':
      return { ...base, status: signal?.aborted === true ? 'interrupted' : 'failed', durationMs: Math.round(o.ms), log, error: errorMessage(o.error) };
    case 'skipped':
      return { ...base, status: 'skipped', durationMs: 0, error: `depends on failed ${o.cause}` };
    case 'cancelled':
      return { ...base, status: 'cancelled', durationMs: 0 };
  }
}
