/**
 * Scoring's one side effect, done for real: a fresh sandbox of the instance's environment (never
 * the one the agent changed), network off, all capabilities dropped, destroyed afterwards. The
 * evaluation itself (files in, eval script, capped merged output) is score/sandbox-runner.ts.
 */
import type { Registry } from '../registry/registry.js';
import type { EvalRunner } from '../score/runner.js';
import { asEvalSandbox, sandboxEvalRunner as runnerOver } from '../score/sandbox-runner.js';
import type { StorePaths } from '../store/paths.js';
import { openSandbox } from './open.js';

export interface EvalSandboxOptions {
  memoryBytes?: number;
  pids?: number;
  diskBytes?: number;
  /** Log bytes kept (head and tail; the middle is cut and counted). */
  maxOutputBytes?: number;
}

export function refEvalRunner(reg: Registry, store: StorePaths, ref: string, opts: EvalSandboxOptions = {}): EvalRunner {
  const limits: Record<string, number> = { diskBytes: opts.diskBytes ?? 2 * 1024 ** 3 };
  if (opts.memoryBytes !== undefined) limits.memoryBytes = opts.memoryBytes;
  if (opts.pids !== undefined) limits.pids = opts.pids;
  const maxOutputBytes = opts.maxOutputBytes ?? 16 * 1024 ** 2;
  return runnerOver(
    async (signal) =>
      asEvalSandbox(
        await openSandbox(reg, store, ref, {
          network: 'none',
          limits,
          maxOutputBytes: maxOutputBytes + 65536,
          warn: () => undefined,
          ...(signal ? { signal } : {}),
        }),
      ),
    { maxOutputBytes },
  );
}
