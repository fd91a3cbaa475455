/**
 * The bounds on a sandbox's async exec jobs: apart from manager.ts so that `serve`'s option
 * defaults come from here without the CLI loading the server's code to register its options.
 */
export interface JobLimits {
  /** Jobs running at once; more are refused (429). */
  maxRunning: number;
  /** Output (stdout + stderr bytes) of finished jobs kept; the oldest finished jobs go first. */
  outputBudgetBytes: number;
}

export const DEFAULT_JOB_LIMITS: JobLimits = { maxRunning: 16, outputBudgetBytes: 16 << 20 };
