/**
 * An EvalRunner over the sandbox runtime: each call makes a fresh sandbox of the instance's
 * environment (the caller's `create`, network off), writes the files into it, runs the eval script
 * and destroys it. Typed structurally so that `Sandbox` from src/sandbox fits as it is.
 *
 * A flooding test suite is cut inside the sandbox, not after: the script's merged output goes
 * through `head -c` then `tail -c`, so the beginning (apply result, start marker) and the end
 * (pytest's summary, end marker) both survive while only a bounded amount crosses into the scorer,
 * and the test process never blocks or fails on its output.
 */
import type { Sandbox } from '../sandbox/index.js';
import { joinElided } from './output-cap.js';
import type { EvalRunner, EvalRunStatus } from './runner.js';
import { shellQuote } from './shell-quote.js';

export interface EvalSandbox {
  writeFile(path: string, data: string): Promise<void>;
  readFile(path: string): Promise<Buffer>;
  exec(argv: string[], opts: { timeoutMs: number; maxOutputBytes: number }): Promise<{ status: EvalRunStatus; exitCode: number | null; stdout: string; stdoutTruncated: boolean; error?: string | undefined }>;
  destroy(): Promise<void>;
}

/** A runtime sandbox as an EvalSandbox; compiles only while the two stay compatible. */
export function asEvalSandbox(sb: Sandbox): EvalSandbox {
  return sb;
}

export interface SandboxRunnerOptions {
  /** Output kept at most (head and tail); default 16 MiB. */
  maxOutputBytes?: number;
  /** Where the script and its byte count go inside the sandbox; default /tmp/minisandbox-run. */
  dir?: string;
}

/** The shell line that runs the script, keeping `head` bytes, then the last `tail` bytes, and counting what followed the head. */
export function cappedRunCommand(dir: string, head: number, tail: number): string {
  const d = shellQuote(dir);
  return `/bin/bash ${d}/eval.sh 2>&1 | { head -c ${head}; tee >(wc -c > ${d}/rest-bytes) | tail -c ${tail}; wait $!; }; exit "\${PIPESTATUS[0]}"`;
}

export function sandboxEvalRunner(create: () => Promise<EvalSandbox>, options: SandboxRunnerOptions = {}): EvalRunner {
  const max = options.maxOutputBytes ?? 16 * 1024 * 1024;
  const head = Math.floor(max / 4);
  const tail = max - head;
  const dir = options.dir ?? '/tmp/minisandbox-run';
  return async (files, script, { timeoutMs }) => {
    const sb = await create();
    try {
      for (const f of files) await sb.writeFile(f.path, f.content);
      await sb.writeFile(`${dir}/eval.sh`, script);
      const out = await sb.exec(['/bin/bash', '-c', cappedRunCommand(dir, head, tail)], { timeoutMs, maxOutputBytes: max + 65536 });
      let rest = 0;
      try {
        rest = Number((await sb.readFile(`${dir}/rest-bytes`)).toString('utf8').trim()) || 0;
      } catch {
        // Killed before the count was written (timeout): nothing is known to be missing.
      }
      const bytes = Buffer.from(out.stdout, 'utf8');
      const truncated = rest > tail;
      const output = truncated ? joinElided(bytes.subarray(0, head), bytes.subarray(head), rest - tail) : out.stdout;
      const note = out.error !== undefined && out.status !== 'ok' ? `\n[minisandbox: ${out.error}]\n` : '';
      return { output: output + note, status: out.status, exitCode: out.exitCode, truncated: truncated || out.stdoutTruncated };
    } finally {
      await sb.destroy();
    }
  };
}
