/**
 * Exec jobs: a command started by one request and looked at (or waited on, or killed) by later
 * ones, so a 20-minute test run needs no open request. A running job keeps its sandbox busy (the
 * idle reaper leaves it); every job dies with its sandbox (the sandbox's end kills its commands).
 * The table hangs off the Sandbox object, so it goes when the sandbox does.
 *
 * Both kinds are bounded per sandbox, so that one client cannot grow the server without limit:
 * running jobs by a count (more are refused, 429), finished ones by the bytes of output they hold
 * (the oldest go first; a job whose output alone is over the budget is not kept, though a long
 * poll already waiting on it still gets its result). A dropped job's id answers 404 "expired".
 */
import { randomBytes } from 'node:crypto';
import { MinisandboxError, NotFoundError } from '../errors.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { outcomeBody } from './http.js';
import { type Entry, type JobLimits, RetryLaterError } from './manager.js';

/** Finished jobs kept per sandbox (the oldest go first), whatever their output; running ones are never dropped. */
export const KEPT_FINISHED_JOBS = 64;
/** Ids of dropped jobs remembered per sandbox, so that asking for one says it expired (not that it never was). */
const REMEMBERED_EXPIRED = 4096;

interface Job {
  id: string;
  startedAt: number;
  finishedAt?: number;
  result?: CommandOutcome;
  /** Timeout deadline (epoch ms): when a running one ends at the latest. */
  deadline: number;
  /** Output bytes it holds once finished. */
  bytes: number;
  abort: AbortController;
  done: Promise<void>;
}

export interface JobInfo {
  job: string;
  status: 'running' | 'done';
  started_at: string;
  finished_at?: string;
  result?: Record<string, unknown>;
}

export class JobCapacityError extends RetryLaterError {
  constructor(sandboxId: string, max: number, retryAfterS: number) {
    super(
      `sandbox ${sandboxId} already runs its maximum of ${max} jobs`,
      `wait for one to end (GET /v1/sandboxes/${sandboxId}/jobs/:job?wait=N) or kill one (DELETE), then retry; serve --max-jobs-per-sandbox raises the cap`,
      retryAfterS,
    );
  }
}

export class SandboxJobs {
  private readonly jobs = new Map<string, Job>();
  private readonly finished: string[] = [];
  private finishedBytes = 0;
  private running = 0;
  private readonly expired = new Set<string>();

  constructor(
    private readonly sandboxId: string,
    private readonly limits: JobLimits,
  ) {}

  /** Starts `run` (ending by `timeoutMs`) with the sandbox marked busy until it ends; 429 when the sandbox runs its maximum. */
  start(e: Entry, timeoutMs: number, run: (signal: AbortSignal) => Promise<CommandOutcome>, onDone?: (o: CommandOutcome) => void): Job {
    if (this.running >= this.limits.maxRunning) throw new JobCapacityError(this.sandboxId, this.limits.maxRunning, this.retryAfterS());
    const abort = new AbortController();
    const now = Date.now();
    const job: Job = { id: `job-${randomBytes(8).toString('hex')}`, startedAt: now, deadline: now + timeoutMs, bytes: 0, abort, done: Promise.resolve() };
    this.running++;
    e.busy++;
    e.lastUsed = Date.now();
    job.done = run(abort.signal)
      .catch(
        (err: unknown): CommandOutcome => ({
          status: 'infra_error',
          exitCode: null,
          signal: null,
          durationMs: Date.now() - job.startedAt,
          stdout: '',
          stderr: '',
          stdoutTruncated: false,
          stderrTruncated: false,
          error: err instanceof Error ? err.message : String(err),
        }),
      )
      .then((o) => {
        this.running--;
        e.busy--;
        e.lastUsed = Date.now();
        job.result = o;
        job.finishedAt = Date.now();
        job.bytes = Buffer.byteLength(o.stdout) + Buffer.byteLength(o.stderr) + (o.error === undefined ? 0 : Buffer.byteLength(o.error));
        this.keep(job);
        onDone?.(o);
      });
    this.jobs.set(job.id, job);
    return job;
  }

  /** Seconds until the first running job's timeout (at least 1, at most 60): when a slot frees up at the latest. */
  private retryAfterS(): number {
    let soonest = Infinity;
    for (const j of this.jobs.values()) if (j.result === undefined) soonest = Math.min(soonest, j.deadline - Date.now());
    return Math.max(1, Math.min(60, Math.ceil(soonest / 1000)));
  }

  private keep(job: Job): void {
    if (job.bytes > this.limits.outputBudgetBytes) {
      this.expire(job.id);
      return;
    }
    this.finished.push(job.id);
    this.finishedBytes += job.bytes;
    for (
      let oldest = this.finished[0];
      oldest !== undefined && (this.finished.length > KEPT_FINISHED_JOBS || this.finishedBytes > this.limits.outputBudgetBytes);
      oldest = this.finished[0]
    ) {
      this.finished.shift();
      this.finishedBytes -= this.jobs.get(oldest)?.bytes ?? 0;
      this.expire(oldest);
    }
  }

  private expire(jobId: string): void {
    this.jobs.delete(jobId);
    this.expired.add(jobId);
    for (const first of this.expired) {
      if (this.expired.size <= REMEMBERED_EXPIRED) break;
      this.expired.delete(first);
    }
  }

  get(jobId: string): Job {
    const j = this.jobs.get(jobId);
    if (j === undefined && this.expired.has(jobId))
      throw new MinisandboxError(
        'NOT_FOUND',
        `job ${jobId} in sandbox ${this.sandboxId} has expired: finished jobs are dropped, oldest first, ` +
          `to keep their output within ${this.limits.outputBudgetBytes} bytes per sandbox (and the last ${KEPT_FINISHED_JOBS})`,
        { hint: 'wait on a job (GET ...?wait=N) to get its result as it ends, or cap its output with max_output' },
      );
    if (j === undefined)
      throw new NotFoundError(
        `job ${jobId} in sandbox ${this.sandboxId}`,
        `list its jobs with GET /v1/sandboxes/${this.sandboxId}/jobs; only the last ${KEPT_FINISHED_JOBS} finished jobs are kept`,
      );
    return j;
  }

  list(): JobInfo[] {
    return [...this.jobs.values()].map(jobInfo);
  }

  /** Kills a running job and waits until it has ended; a finished job is forgotten. */
  async kill(jobId: string): Promise<void> {
    const j = this.get(jobId);
    if (j.result === undefined) {
      j.abort.abort(new Error('killed through DELETE'));
      await j.done;
    } else {
      this.jobs.delete(jobId);
      this.finished.splice(this.finished.indexOf(jobId), 1);
      this.finishedBytes -= j.bytes;
    }
  }
}

export function jobInfo(j: Job): JobInfo {
  return {
    job: j.id,
    status: j.result === undefined ? 'running' : 'done',
    started_at: new Date(j.startedAt).toISOString(),
    ...(j.finishedAt === undefined ? {} : { finished_at: new Date(j.finishedAt).toISOString() }),
    ...(j.result === undefined ? {} : { result: outcomeBody(j.result) }),
  };
}

const tables = new WeakMap<Sandbox, SandboxJobs>();

export function jobsOf(e: Entry, limits: JobLimits): SandboxJobs {
  let t = tables.get(e.sb);
  if (t === undefined) {
    t = new SandboxJobs(e.sb.id, limits);
    tables.set(e.sb, t);
  }
  return t;
}

/** Until the job ends, `ms` pass, or `signal` fires (the waiting client went away). */
export async function waitFor(j: Job, ms: number, signal: AbortSignal): Promise<void> {
  if (j.result !== undefined || ms <= 0) return;
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  await Promise.race([
    j.done,
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
      onAbort = resolve;
      signal.addEventListener('abort', onAbort, { once: true });
    }),
  ]);
  clearTimeout(timer);
  if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
}
