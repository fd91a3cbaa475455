/**
 * A per-key lock file so that processes pulling the same layer do the work once: the winner lays
 * out, the others wait for the result. A lock whose owner died (crash) is taken over; the lock
 * only avoids duplicate work, correctness rests on the atomic rename of the result.
 */
import { open, readFile, rm } from 'node:fs/promises';
import { isErrno } from '../util/fs.js';

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return isErrno(e, 'EPERM');
  }
}

export async function withLock<T>(lockPath: string, done: () => Promise<boolean>, work: () => Promise<T>, pollMs = 50): Promise<T | null> {
  for (;;) {
    if (await done()) return null;
    try {
      const fh = await open(lockPath, 'wx');
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) throw e;
      const owner = Number.parseInt(await readFile(lockPath, 'utf8').catch(() => ''), 10);
      // An empty lock file is one being written this instant: give it the benefit of the doubt.
      if (Number.isFinite(owner) && owner !== process.pid && !pidAlive(owner)) await rm(lockPath, { force: true });
      await new Promise((r) => setTimeout(r, pollMs));
      continue;
    }
    try {
      if (await done()) return null;
      return await work();
    } finally {
      await rm(lockPath, { force: true });
    }
  }
}
