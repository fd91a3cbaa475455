/**
 * Scoring's one side effect, done for real: a fresh sandbox of the instance's environment (never
 * the one the agent changed), network off, all capabilities dropped, destroyed afterwards. The
 * evaluation itself (files in, eval script, capped merged output) is score/sandbox-runner.ts.
 */
import type { Registry } from '../registry/registry.js';
import type { EvalRunner } from '../score/runner.js';
import { asEvalSandbox, sandboxEvalRunner as runnerOver } from '../score/sandbox-runner.js';
import type { StorePaths } from '../store/paths.js';
import { type OpenOptions, openSandbox } from './open.js';

export interface EvalSandboxOptions {
  memoryBytes?: number;
  pids?: number;
  diskBytes?: number;
  /** Log bytes kept (head and tail; the middle is cut and counted). */
  maxOutputBytes?: number;
}

/** How an eval sandbox is opened (network off, a disk limit, room for the capped log), and the log bytes kept. */
export function evalOpenOptions(opts: EvalSandboxOptions = {}): { open: OpenOptions; maxOutputBytes: number } {
  const limits: Record<string, number> = { diskBytes: opts.diskBytes ?? 2 * 1024 ** 3 };
  if (opts.memoryBytes !== undefined) limits.memoryBytes = opts.memoryBytes;
  if (opts.pids !== undefined) limits.pids = opts.pids;
  const maxOutputBytes = opts.maxOutputBytes ?? 16 * 1024 ** 2;
  return { open: { network: 'none', limits, maxOutputBytes: maxOutputBytes + 65536, warn: () => undefined }, maxOutputBytes };
}

export function refEvalRunner(reg: Registry, store: StorePaths, ref: string, opts: EvalSandboxOptions = {}): EvalRunner {
  const { open, maxOutputBytes } = evalOpenOptions(opts);
  return runnerOver(async (signal) => asEvalSandbox(await openSandbox(reg, store, ref, { ...open, ...(signal ? { signal } : {}) })), { maxOutputBytes });
}
