/**
 * A small generic scheduler for build graphs: runs each node's function once all its deps have
 * succeeded, at most `jobs` at a time, in the given order among ready nodes. A failure skips
 * everything that depends on it; without `keepGoing` it also stops starting new nodes (running
 * ones finish, and are told through their AbortSignal). With a retry policy, an error it calls
 * retryable (a transient network error) reruns the node after a backoff.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidInputError } from '../errors.js';

export interface ScheduleNode {
  id: string;
  deps: readonly string[];
}

export type NodeOutcome<T> =
  | { status: 'ok'; value: T; ms: number; attempts: number }
  | { status: 'failed'; error: unknown; ms: number; attempts: number }
  /** A dependency failed (or was itself skipped): `cause` is the failed node's id. */
  | { status: 'skipped'; cause: string }
  /** Never started because the run stopped at a failure (no keepGoing). */
  | { status: 'cancelled' };

export type ScheduleEvent<T> =
  | { type: 'start'; id: string; running: number }
  | { type: 'retry'; id: string; attempt: number; error: unknown }
  | { type: 'done'; id: string; outcome: NodeOutcome<T> };

export interface RetryPolicy {
  /** Total tries per node, at least 1. */
  attempts: number;
  /** Whether an error is worth another try (a transient network error, not a failing test). */
  retryable: (error: unknown) => boolean;
  /** Wait before try k+1 is `backoffMs * 2^(k-1)`. */
  backoffMs: number;
}

export interface ScheduleOptions<T> {
  jobs: number;
  keepGoing: boolean;
  /** The caller's stop (Ctrl-C): no node starts after it, and running ones are told. */
  signal?: AbortSignal;
  retry?: RetryPolicy;
  onEvent?: (e: ScheduleEvent<T>) => void;
}

/** Rejects unknown deps, duplicate ids and cycles before anything runs. */
export function checkGraph(nodes: readonly ScheduleNode[]): void {
  const ids = new Set<string>();
  for (const n of nodes) {
    if (ids.has(n.id)) throw new InvalidInputError(`build graph: duplicate node ${n.id}`);
    ids.add(n.id);
  }
  for (const n of nodes) for (const d of n.deps) if (!ids.has(d)) throw new InvalidInputError(`build graph: ${n.id} depends on unknown node ${d}`);
  const state = new Map<string, 'visiting' | 'done'>();
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const visit = (id: string, path: string[]): void => {
    const s = state.get(id);
    if (s === 'done') return;
    if (s === 'visiting') throw new InvalidInputError(`build graph: cycle ${[...path, id].join(' -> ')}`);
    state.set(id, 'visiting');
    for (const d of byId.get(id)?.deps ?? []) visit(d, [...path, id]);
    state.set(id, 'done');
  };
  for (const n of nodes) visit(n.id, []);
}

export async function runGraph<N extends ScheduleNode, T>(
  nodes: readonly N[],
  run: (node: N, signal: AbortSignal) => Promise<T>,
  opts: ScheduleOptions<T>,
): Promise<Map<string, NodeOutcome<T>>> {
  checkGraph(nodes);
  const jobs = Math.max(1, Math.floor(opts.jobs));
  const outcomes = new Map<string, NodeOutcome<T>>();
  const pending = [...nodes];
  const running = new Set<Promise<void>>();
  const abort = new AbortController();
  let stopped = false;
  const onStop = (): void => {
    stopped = true;
    abort.abort(opts.signal?.reason);
  };
  if (opts.signal?.aborted === true) onStop();
  else opts.signal?.addEventListener('abort', onStop, { once: true });

  const settle = (id: string, outcome: NodeOutcome<T>): void => {
    outcomes.set(id, outcome);
    opts.onEvent?.({ type: 'done', id, outcome });
  };

  /** Moves pending nodes whose deps failed to skipped (transitively, since pending is re-scanned). */
  const skipBlocked = (): boolean => {
    let changed = false;
    for (let i = 0; i < pending.length; i++) {
      const n = pending[i]!;
      const bad = n.deps.find((d) => {
        const s = outcomes.get(d)?.status;
        return s === 'failed' || s === 'skipped';
      });
      if (bad === undefined) continue;
      const o = outcomes.get(bad);
      settle(n.id, { status: 'skipped', cause: o?.status === 'skipped' ? o.cause : bad });
      pending.splice(i, 1);
      i--;
      changed = true;
    }
    return changed;
  };

  const start = (n: N): void => {
    const t0 = performance.now();
    opts.onEvent?.({ type: 'start', id: n.id, running: running.size + 1 });
    const p: Promise<void> = (async () => {
      let attempt = 1;
      try {
        for (;;) {
          try {
            const value = await run(n, abort.signal);
            settle(n.id, { status: 'ok', value, ms: performance.now() - t0, attempts: attempt });
            return;
          } catch (error) {
            const r = opts.retry;
            if (r === undefined || attempt >= r.attempts || abort.signal.aborted || !r.retryable(error)) throw error;
            opts.onEvent?.({ type: 'retry', id: n.id, attempt, error });
            await sleep(r.backoffMs * 2 ** (attempt - 1));
            attempt++;
          }
        }
      } catch (error) {
        settle(n.id, { status: 'failed', error, ms: performance.now() - t0, attempts: attempt });
        if (!opts.keepGoing && !stopped) {
          stopped = true;
          abort.abort(new Error(`stopping: ${n.id} failed`));
        }
      }
    })().finally(() => running.delete(p));
    running.add(p);
  };

  for (;;) {
    while (skipBlocked());
    if (!stopped) {
      for (let i = 0; i < pending.length && running.size < jobs; i++) {
        const n = pending[i]!;
        if (n.deps.every((d) => outcomes.get(d)?.status === 'ok')) {
          pending.splice(i, 1);
          i--;
          start(n);
        }
      }
    }
    if (running.size === 0) break;
    await Promise.race(running);
  }
  opts.signal?.removeEventListener('abort', onStop);
  for (const n of pending) settle(n.id, { status: 'cancelled' });
  return outcomes;
}

/** The scheduler's view of a plan: each node depends on its parent node. */
export function scheduleNodes<P extends { id: string; parent: string | null }>(nodes: readonly P[]): Array<P & ScheduleNode> {
  return nodes.map((n) => ({ ...n, deps: n.parent === null ? [] : [n.parent] }));
}
