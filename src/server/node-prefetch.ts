/**
 * The node's background prefetch (`serve --prefetch-dataset`, POST /v1/prefetch): environments
 * pulled into the store ahead of the creates that use them, within an I/O budget, while the
 * server serves; GET /v1/prefetch reports how far it got. One per server. Refs asked for while it
 * runs join it (a batch after the current one); a ref already in the store costs a look-up.
 */
import { datasetNameFromFile } from '../builder/plan.js';
import { parseRefName } from '../cas/ref-name.js';
import { loadDataset } from '../dataset/read.js';
import type { Registry } from '../registry/registry.js';
import { hostIdShift } from '../runtime/open.js';
import type { StorePaths } from '../store/paths.js';
import { ByteBudget, DEFAULT_PREFETCH_BUDGET, prefetch } from '../store/prefetch.js';
import { errorMessage, MinisandboxError } from '../errors.js';
import { PREWARM_JOBS } from './prewarm.js';

export interface PrefetchFailure {
  ref: string;
  code: string;
  message: string;
}

/** GET /v1/prefetch. `done` counts the refs now in the store; `done + failed.length == total` once it ended. */
export interface PrefetchStatus {
  state: 'idle' | 'running' | 'done' | 'failed';
  total: number;
  done: number;
  failed: PrefetchFailure[];
  bytes_fetched: number;
  io_budget_bytes: number | null;
  started_at: string | null;
  finished_at: string | null;
}

export class NodePrefetch {
  private readonly queue: string[] = [];
  /** Every ref of this prefetch, queued or ended: a ref asked for twice is pulled once. */
  private readonly known = new Set<string>();
  private total = 0;
  private done = 0;
  private readonly failed: PrefetchFailure[] = [];
  private bytes = 0;
  private budgetBytes: number | null = null;
  private startedAt: number | null = null;
  private finishedAt: number | null = null;
  private running: Promise<void> | undefined;
  private readonly abort = new AbortController();

  constructor(
    private readonly reg: Registry,
    private readonly store: StorePaths,
    private readonly log: (event: Record<string, unknown>) => void = () => undefined,
    private readonly jobs = PREWARM_JOBS,
  ) {}

  /** Resolves when the prefetch running now (with every ref that joins it) has ended; at once if none runs. */
  async ended(): Promise<void> {
    while (this.running !== undefined) await this.running;
  }

  /**
   * Starts pulling `refs` (or adds them to the running prefetch); a new prefetch after one ended
   * starts its counts afresh. `budgetBytes` applies from the next batch on.
   */
  start(refs: readonly string[], budgetBytes = DEFAULT_PREFETCH_BUDGET): PrefetchStatus {
    if (this.running === undefined) {
      this.known.clear();
      this.failed.length = 0;
      this.total = this.done = this.bytes = 0;
      this.startedAt = Date.now();
      this.finishedAt = null;
    }
    this.budgetBytes = budgetBytes;
    for (const r of refs) {
      if (this.known.has(r)) continue;
      this.known.add(r);
      this.queue.push(r);
      this.total++;
    }
    this.running ??= this.run().finally(() => {
      this.running = undefined;
      this.finishedAt = Date.now();
      const s = this.status();
      this.log({ event: 'prefetch-ended', state: s.state, total: s.total, done: s.done, failed: s.failed.length, bytes_fetched: s.bytes_fetched });
    });
    return this.status();
  }

  private async run(): Promise<void> {
    try {
      const idShift = await hostIdShift(this.store);
      while (this.queue.length > 0 && !this.abort.signal.aborted) {
        const batch = this.queue.splice(0);
        await prefetch(this.reg, this.store, batch, {
          idShift,
          jobs: this.jobs,
          budget: new ByteBudget(this.budgetBytes ?? DEFAULT_PREFETCH_BUDGET),
          signal: this.abort.signal,
          onResult: (r) => {
            this.bytes += r.fetchedBytes;
            if (r.status === 'failed') this.failed.push({ ref: r.ref, code: r.code ?? 'INTERNAL', message: r.error ?? 'failed' });
            else this.done++;
          },
        });
      }
    } catch (e) {
      // the host could not be probed: every ref not pulled fails with that
      for (const ref of this.queue.splice(0)) this.failed.push({ ref, code: e instanceof MinisandboxError ? e.code : 'INTERNAL', message: errorMessage(e) });
    }
  }

  status(): PrefetchStatus {
    const state = this.startedAt === null ? 'idle' : this.running !== undefined ? 'running' : this.failed.length > 0 ? 'failed' : 'done';
    return {
      state,
      total: this.total,
      done: this.done,
      failed: [...this.failed],
      bytes_fetched: this.bytes,
      io_budget_bytes: this.budgetBytes,
      started_at: this.startedAt === null ? null : new Date(this.startedAt).toISOString(),
      finished_at: this.finishedAt === null ? null : new Date(this.finishedAt).toISOString(),
    };
  }

  /** Stops between layers and waits for it (server shutdown): what is laid out stays. */
  async close(): Promise<void> {
    this.abort.abort(new Error('the server is shutting down'));
    await this.running;
  }
}

/** `serve --prefetch-dataset [NAME=]FILE`: `<name>/<instance_id>` of every row (NAME: from the file, as build names it). */
export async function prefetchDatasetRefs(spec: string): Promise<string[]> {
  const m = /^(?:([^=/]+)=)?(.+)$/.exec(spec)!;
  const file = m[2]!;
  const name = m[1] ?? datasetNameFromFile(file);
  parseRefName(`${name}/x`); // a bad NAME stops the start, not every pull
  return (await loadDataset(file)).map((r) => `${name}/${r.row.instance_id}`);
}
