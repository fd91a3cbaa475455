/**
 * The run summary's lock file: a lock left by a process that died is broken, one held by a live
 * process is waited for (the write happens once it is released).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunSummarySchema } from './report.js';
import { recordInRunSummary } from './run-summary-update.js';
import { summaryLockPath } from './score-run.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'run-summary-lock-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function startTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
}

const done = { status: 'completed', resolved: true } as const;

describe('run summary lock', () => {
  it('is broken when its owner has exited, and when its pid now belongs to a later process', async () => {
    const p = spawn('true');
    const pid = await new Promise<number>((r) => p.on('exit', () => r(p.pid!)));
    const path = join(dir, 'dead.json');
    await writeFile(summaryLockPath(path), `${pid} 1 abc\n`);
    await recordInRunSummary(path, ['a'], 'a', 'p', done);
    // a live pid whose start time is not the one recorded: the pid was reused
    const reused = join(dir, 'reused.json');
    await writeFile(summaryLockPath(reused), `${process.pid} 1 abc\n`);
    await recordInRunSummary(reused, ['a'], 'a', 'p', done);
    for (const f of [path, reused]) {
      expect(RunSummarySchema.parse(JSON.parse(await readFile(f, 'utf8'))).resolved_ids).toEqual(['a']);
      await expect(readFile(summaryLockPath(f))).rejects.toMatchObject({ code: 'ENOENT' });
    }
  });

  it('held by a live process, is waited for', async () => {
    const holder = spawn('sleep', ['600'], { stdio: 'ignore' });
    try {
      const path = join(dir, 'live.json');
      await writeFile(summaryLockPath(path), `${holder.pid} ${startTime(holder.pid!)} abc\n`);
      let written = false;
      const rec = recordInRunSummary(path, ['a'], 'a', 'p', done).then(() => (written = true));
      await new Promise((r) => setTimeout(r, 500));
      expect(written).toBe(false);
      await expect(readFile(path)).rejects.toMatchObject({ code: 'ENOENT' });
      await rm(summaryLockPath(path));
      await rec;
      expect(RunSummarySchema.parse(JSON.parse(await readFile(path, 'utf8'))).resolved_ids).toEqual(['a']);
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
