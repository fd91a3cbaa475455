/**
 * The one side effect scoring needs: run a bash script in a fresh environment of the instance,
 * after writing some files into it, and hand back one merged stdout+stderr stream. The sandbox
 * runtime implements it (fresh sandbox, network off); host-runner.ts implements it on the host
 * for tests and for the benchmark's baseline.
 */
export interface EvalFile {
  /** Absolute path inside the environment. */
  path: string;
  content: string;
}

export type EvalRunStatus = 'ok' | 'timeout' | 'oom' | 'killed' | 'infra_error';

export interface EvalRunResult {
  /** stdout and stderr merged in write order; possibly cut in the middle when `truncated`. */
  output: string;
  status: EvalRunStatus;
  exitCode: number | null;
  truncated: boolean;
}

/** `signal`: the caller gave up; a runner stops the script (and its sandbox) as soon as it can. */
export type EvalRunner = (files: EvalFile[], script: string, opts: { timeoutMs: number; signal?: AbortSignal | undefined }) => Promise<EvalRunResult>;
