/**
 * Scoring's one side effect, done for real: a fresh sandbox of the instance's environment (never
 * the one the agent changed), network off, the patch files written in, the eval script run by bash (sh where an environment has no bash)
 * with stderr merged into stdout as the harness does, then the sandbox destroyed.
 */
import type { Registry } from '../registry/registry.js';
import type { EvalRunner } from '../score/runner.js';
import type { StorePaths } from '../store/paths.js';
import { openSandbox } from './open.js';

export interface EvalSandboxOptions {
  memoryBytes?: number;
  pids?: number;
  diskBytes?: number;
  /** Log bytes kept (the rest is cut, flagged as truncated). */
  maxOutputBytes?: number;
}

export function sandboxEvalRunner(reg: Registry, store: StorePaths, ref: string, opts: EvalSandboxOptions = {}): EvalRunner {
  return async (files, script, { timeoutMs }) => {
    let sb;
    try {
      const limits: Record<string, number> = { diskBytes: opts.diskBytes ?? 2 * 1024 ** 3 };
      if (opts.memoryBytes !== undefined) limits.memoryBytes = opts.memoryBytes;
      if (opts.pids !== undefined) limits.pids = opts.pids;
      sb = await openSandbox(reg, store, ref, { network: 'none', limits, maxOutputBytes: opts.maxOutputBytes ?? 32 << 20, warn: () => undefined });
    } catch (e) {
      return { output: `minisandbox: sandbox failed: ${String(e)}\n`, status: 'infra_error', exitCode: null, truncated: false };
    }
    try {
      for (const f of files) await sb.writeFile(f.path, f.content);
      await sb.writeFile('/tmp/minisandbox-eval/eval.sh', script);
      const o = await sb.exec(['/bin/sh', '-c', 'exec 2>&1; if command -v bash >/dev/null; then exec bash "$0"; else exec sh "$0"; fi', '/tmp/minisandbox-eval/eval.sh'], { timeoutMs });
      return { output: o.stdout, status: o.status, exitCode: o.exitCode, truncated: o.stdoutTruncated };
    } catch (e) {
      return { output: `minisandbox: sandbox failed: ${String(e)}\n`, status: 'infra_error', exitCode: null, truncated: false };
    } finally {
      await sb.destroy();
    }
  };
}
