import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCalcRepo, resetCalcRepo, type CalcRepo } from './fixtures/calc-repo.js';
import { sandboxEvalRunner, type EvalSandbox } from './sandbox-runner.js';
import { scoreInstance } from './score-instance.js';

let root: string;
let repo: CalcRepo;

/**
 * The EvalSandbox contract met by the host itself (files on the host, commands run by bash),
 * so that the adapter's own shell pipeline (head/tail cut, byte count, exit status) runs for real.
 */
function hostSandbox(log: string[]): EvalSandbox {
  return {
    exec(argv, { timeoutMs, maxOutputBytes, stdin }) {
      return new Promise((resolve) => {
        const child = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
        child.stdin.end(stdin);
        const chunks: Buffer[] = [];
        let size = 0;
        child.stdout.on('data', (c: Buffer) => {
          size += c.length;
          if (size <= maxOutputBytes) chunks.push(c);
        });
        child.stderr.resume();
        let timedOut = false;
        const t = setTimeout(() => {
          timedOut = true;
          process.kill(-child.pid!, 'SIGKILL');
        }, timeoutMs);
        child.on('close', (code) => {
          clearTimeout(t);
          resolve({
            status: timedOut ? 'timeout' : 'ok',
            exitCode: code,
            stdout: Buffer.concat(chunks).toString('utf8'),
            stdoutTruncated: size > maxOutputBytes,
          });
        });
      });
    },
    async destroy() {
      log.push('destroyed');
    },
  };
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'score-sbx-'));
  repo = await makeCalcRepo(join(root, 'repo'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('sandbox runner adapter', () => {
  const runner = (log: string[], maxOutputBytes?: number) =>
    sandboxEvalRunner(
      async () => {
        resetCalcRepo(repo);
        return hostSandbox(log);
      },
      { dir: join(root, 'run'), ...(maxOutputBytes === undefined ? {} : { maxOutputBytes }) },
    );

  it('runs the eval script in a fresh environment per call, passes its exit status and destroys it', async () => {
    const log: string[] = [];
    const { result } = await scoreInstance(repo.instance, repo.spec, repo.gold, runner(log), { timeoutMs: 60_000, filesDir: join(root, 'files') });
    expect(result).toMatchObject({ status: 'completed', resolved: true, applied_with: 'git apply --verbose' });
    expect(result.runner?.truncated).toBe(false);
    expect(log).toEqual(['destroyed']);
    const { log: evalLog } = await scoreInstance(repo.instance, repo.spec, repo.gold, runner([]), { timeoutMs: 60_000, filesDir: join(root, 'files') });
    expect(evalLog).not.toContain('@@minisandbox-rest-bytes');
    expect(evalLog.trimEnd().endsWith('tests/test_calc.py')).toBe(true); // the trace of the final reset
    const failing = await scoreInstance(repo.instance, { ...repo.spec, testCmd: 'exit 7 #' }, repo.gold, runner(log), {
      timeoutMs: 60_000,
      filesDir: join(root, 'files'),
    });
    // A test command that exits the script: its status comes through the output pipeline, and
    // with no end marker in the log nothing is graded.
    expect(failing.result.runner?.exit_code).toBe(7);
    expect(failing.result.status).toBe('error');
    expect(log).toEqual(['destroyed', 'destroyed']);
  });

  it('cuts a flood inside the environment, keeping the head and the graded tail', async () => {
    const flood = repo.gold
      .replace('+    return a + b', "+    import sys\n+    for _ in range(20000): sys.stderr.write('x' * 999 + '\\n')\n+    return a + b")
      .replace('@@ -3,7 +3,7 @@', '@@ -3,7 +3,9 @@');
    const { result, log } = await scoreInstance(repo.instance, repo.spec, flood, runner([], 1 << 20), { timeoutMs: 60_000, filesDir: join(root, 'files') });
    expect(result.runner?.truncated).toBe(true);
    expect(log).toMatch(/\[minisandbox: \d+ bytes of output elided\]/);
    const elided = Number(/\[minisandbox: (\d+) bytes/.exec(log)![1]);
    expect(elided).toBeGreaterThan(18_000_000);
    expect(Buffer.byteLength(log)).toBeLessThan((1 << 20) + 200);
    expect(result).toMatchObject({ status: 'completed', resolved: true });
  });
});
