/**
 * Exec jobs: a command started by one request and looked at (or waited on, or killed) by later
 * ones, so a 20-minute test run needs no open request. A running job keeps its sandbox busy (the
 * idle reaper leaves it); every job dies with its sandbox (the sandbox's end kills its commands).
 * The table hangs off the Sandbox object, so it goes when the sandbox does.
 */
import { randomBytes } from 'node:crypto';
import { NotFoundError } from '../errors.js';
import type { CommandOutcome } from '../sandbox/outcome.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { outcomeBody } from './http.js';
import type { Entry } from './manager.js';

/** Finished jobs kept per sandbox (the oldest go first); running ones are never dropped. */
export const KEPT_FINISHED_JOBS = 64;

interface Job {
  id: string;
  startedAt: number;
  finishedAt?: number;
  result?: CommandOutcome;
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

export class SandboxJobs {
  private readonly jobs = new Map<string, Job>();
  private readonly finished: string[] = [];

  constructor(private readonly sandboxId: string) {}

  /** Starts `run` with the sandbox marked busy until it ends. */
  start(e: Entry, run: (signal: AbortSignal) => Promise<CommandOutcome>, onDone?: (o: CommandOutcome) => void): Job {
    const abort = new AbortController();
    const job: Job = { id: `job-${randomBytes(8).toString('hex')}`, startedAt: Date.now(), abort, done: Promise.resolve() };
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
        e.busy--;
        e.lastUsed = Date.now();
        job.result = o;
        job.finishedAt = Date.now();
        this.finished.push(job.id);
        while (this.finished.length > KEPT_FINISHED_JOBS) this.jobs.delete(this.finished.shift()!);
        onDone?.(o);
      });
    this.jobs.set(job.id, job);
    return job;
  }

  get(jobId: string): Job {
    const j = this.jobs.get(jobId);
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

export function jobsOf(e: Entry): SandboxJobs {
  let t = tables.get(e.sb);
  if (t === undefined) {
    t = new SandboxJobs(e.sb.id);
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
