/**
 * The library as a user imports it: by name, from plain node (no tsx, no TypeScript), from the
 * compiled dist/lib that `npm run build` (and bin/setup) make. A temp dir with
 * node_modules/minisandbox linked to this checkout stands for an installed package.
 */
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = resolve('.');
const consumer = mkdtempSync(join(tmpdir(), 'ms-consumer-'));
chmodSync(consumer, 0o755); // the example's store lies below it: the sandbox's ids must reach it

/** Newest modification time of the library's sources (tests aside). */
async function newestSource(dir: string): Promise<number> {
  let newest = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, await newestSource(p));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

beforeAll(async () => {
  // npm test builds it first (bin/setup); a run of this file alone after an edit builds it here
  const built = join(ROOT, 'dist', 'lib', 'index.js');
  if (!existsSync(built) || statSync(built).mtimeMs < (await newestSource(join(ROOT, 'src')))) {
    await run(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.lib.json')], { cwd: ROOT });
  }
  mkdirSync(join(consumer, 'node_modules'));
  symlinkSync(ROOT, join(consumer, 'node_modules', 'minisandbox'));
  copyFileSync(join(ROOT, 'examples', 'run-and-grade.mjs'), join(consumer, 'run-and-grade.mjs'));
});
afterAll(() => rmSync(consumer, { recursive: true, force: true }));

/** Evaluates an ES module snippet with plain node in the consumer dir; its stdout. */
async function nodeEval(code: string): Promise<string> {
  return (await run(process.execPath, ['--input-type=module', '-e', code], { cwd: consumer })).stdout;
}

describe('the package by name', () => {
  it('exports the entry points with their types, and no internal file', async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, string | { types: string; default: string }> };
    for (const [sub, target] of Object.entries(pkg.exports)) {
      if (typeof target === 'string') continue;
      expect(existsSync(join(ROOT, target.types)), `${sub} types`).toBe(true);
      expect(existsSync(join(ROOT, target.default)), `${sub} code`).toBe(true);
    }
    const out = await nodeEval(`
      const root = await import('minisandbox');
      const rt = await import('minisandbox/runtime');
      const score = await import('minisandbox/score');
      const reg = await import('minisandbox/registry');
      const store = await import('minisandbox/store');
      const errors = await import('minisandbox/errors');
      const client = await import('minisandbox/client');
      const lost = new client.NodeLostError('gone', { node: 'n1', sandboxId: 'sb-1-0.n1', reason: 'unreachable' });
      let internal = 'importable';
      try { await import('minisandbox/src/registry/open.js'); } catch (e) { internal = e.code; }
      console.log(JSON.stringify({
        same: root.openSandbox === rt.openSandbox && root.scoreInstance === score.scoreInstance &&
          root.openRegistry === reg.openRegistry && root.StorePaths === store.StorePaths &&
          root.Pool === client.Pool && root.Client === client.Client,
        lost: [lost instanceof client.TransportError, lost instanceof errors.MinisandboxError, lost.code, client.nodeOf(lost.sandboxId)],
        runners: [typeof rt.refEvalRunner, typeof score.sandboxEvalRunner],
        aborted: errors.ErrorCode.ABORTED,
        internal,
      }));`);
    expect(JSON.parse(out)).toEqual({
      same: true,
      lost: [true, true, 'NODE_LOST', 'n1'],
      runners: ['function', 'function'],
      aborted: 'ABORTED',
      internal: 'ERR_PACKAGE_PATH_NOT_EXPORTED',
    });
  });

  it('runs examples/run-and-grade.mjs: publishes a busybox environment, works in a sandbox of it and grades the log', async () => {
    const work = join(consumer, 'work');
    mkdirSync(work);
    const { stdout } = await run(process.execPath, [join(consumer, 'run-and-grade.mjs'), work], { cwd: consumer });
    expect(JSON.parse(stdout)).toEqual({ resolved: true, notes: 'task fix-it\n', exitCode: 0 });
    // the sandbox was disposed of: nothing is left in the store's sandbox dir
    expect(await readdir(join(work, 'store', 'sandboxes')).catch(() => [])).toEqual([]);
  });
});
