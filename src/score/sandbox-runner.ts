/**
 * An EvalRunner over the sandbox runtime: each call makes a fresh sandbox of the instance's
 * environment (the caller's `create`, network off), writes the files into it, runs the eval script
 * and destroys it. Typed structurally so that `Sandbox` from src/sandbox fits as it is.
 *
 * Everything happens in one exec into the sandbox (files arrive on stdin), since each exec costs
 * tens of milliseconds. A flooding test suite is cut inside the sandbox, not after: the script's
 * merged output goes through `head -c` then `tail -c`, so the beginning (apply result, start marker) and the end
 * (pytest's summary, end marker) both survive while only a bounded amount crosses into the scorer,
 * and the test process never blocks or fails on its output.
 */
import type { Sandbox } from '../sandbox/index.js';
import { joinElided } from './output-cap.js';
import type { EvalRunner, EvalRunStatus } from './runner.js';
import { shellQuote } from './shell-quote.js';

export interface EvalSandbox {
  exec(
    argv: string[],
    opts: { timeoutMs: number; maxOutputBytes: number; stdin: Buffer; signal?: AbortSignal | undefined },
  ): Promise<{ status: EvalRunStatus; exitCode: number | null; stdout: string; stdoutTruncated: boolean; error?: string | undefined }>;
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

const TRAILER = '@@minisandbox-rest-bytes ';

/**
 * One shell program for the whole evaluation, so that it costs one exec into the sandbox: unpack
 * the files from stdin (`head -c` reads exactly its count from a pipe), then run the script with
 * its merged output cut to `head` bytes plus the last `tail` bytes, and print, last, how many
 * bytes followed the head (the last line is always this trailer: test output cannot forge it).
 */
export function evalProgram(files: { path: string; bytes: number }[], dir: string, head: number, tail: number): string {
  const d = shellQuote(dir);
  const unpack = files.map((f) => `mkdir -p -- "$(dirname -- ${shellQuote(f.path)})" && head -c ${f.bytes} > ${shellQuote(f.path)}`).join(' && ');
  return [
    `{ ${unpack}; } || { echo 'minisandbox: could not write the eval files' >&2; exit 125; }`,
    // dd counts what follows the head as a foreground stage of the pipeline (its byte count is on
    // its stderr once it is done): a counter in a process substitution may not have written yet.
    `/bin/bash ${d}/eval.sh < /dev/null 2>&1 | { head -c ${head}; LC_ALL=C dd bs=65536 2> ${d}/rest.log | tail -c ${tail}; }`,
    'status=${PIPESTATUS[0]}',
    `printf '\n${TRAILER}%s\n' "$(sed -n 's/^\\([0-9][0-9]*\\) bytes.*/\\1/p' ${d}/rest.log 2>/dev/null | tail -n 1 | grep . || echo 0)"`,
    'exit "$status"',
  ].join('\n');
}

/** `create` gets the caller's signal, to cancel a sandbox that is still starting. */
export function sandboxEvalRunner(create: (signal?: AbortSignal) => Promise<EvalSandbox>, options: SandboxRunnerOptions = {}): EvalRunner {
  const max = options.maxOutputBytes ?? 16 * 1024 * 1024;
  const head = Math.floor(max / 4);
  const tail = max - head;
  const dir = options.dir ?? '/tmp/minisandbox-run';
  return async (files, script, { timeoutMs, signal }) => {
    const blobs = [...files, { path: `${dir}/eval.sh`, content: script }].map((f) => ({ path: f.path, data: Buffer.from(f.content, 'utf8') }));
    const program = evalProgram(
      blobs.map((b) => ({ path: b.path, bytes: b.data.length })),
      dir,
      head,
      tail,
    );
    const sb = await create(signal);
    try {
      const out = await sb.exec(['/bin/bash', '-c', program], {
        timeoutMs,
        maxOutputBytes: max + 65536,
        stdin: Buffer.concat(blobs.map((b) => b.data)),
        signal,
      });
      let stdout = out.stdout;
      let rest = 0;
      const at = stdout.lastIndexOf(`\n${TRAILER}`);
      if (at !== -1 && /^\d+\n?$/.test(stdout.slice(at + 1 + TRAILER.length))) {
        rest = Number(stdout.slice(at + 1 + TRAILER.length).trim());
        stdout = stdout.slice(0, at);
      }
      // No trailer: killed (timeout) before the end, so nothing is known to be missing.
      const bytes = Buffer.from(stdout, 'utf8');
      const truncated = rest > tail;
      const output = truncated ? joinElided(bytes.subarray(0, head), bytes.subarray(head), rest - tail) : stdout;
      const note = out.error !== undefined && out.status !== 'ok' ? `\n[minisandbox: ${out.error}]\n` : '';
      return { output: output + note, status: out.status, exitCode: out.exitCode, truncated: truncated || out.stdoutTruncated };
    } finally {
      await sb.destroy();
    }
  };
}
