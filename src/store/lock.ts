/**
 * Lock files. withLock: a per-key lock so that processes pulling the same layer do the work once:
 * the winner lays out, the others wait for the result. A lock whose owner died (crash) is taken
 * over; the lock only avoids duplicate work, correctness rests on the atomic rename of the result.
 * withExclusiveLock: mutual exclusion across processes, for read-modify-writes of a shared file.
 */
import { randomBytes } from 'node:crypto';
import { link, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { isErrno } from '../util/fs.js';
import { processStartTime } from '../util/process.js';

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return isErrno(e, 'EPERM');
  }
}

/**
 * `onWait`: called once, with the holder's pid where the lock names one, when the lock is held by
 * another (a caller that waits minutes says why).
 */
export async function withLock<T>(
  lockPath: string,
  done: () => Promise<boolean>,
  work: () => Promise<T>,
  pollMs = 50,
  onWait?: (owner: number | undefined) => void,
): Promise<T | null> {
  let told = false;
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
      else if (!told) {
        told = true;
        onWait?.(Number.isFinite(owner) ? owner : undefined);
      }
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

function ownerAlive(content: string): boolean {
  const [pidText, start] = content.split(' ');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false; // not a lock this code wrote: nobody holds it
  if (!pidAlive(pid)) return false;
  const now = processStartTime(pid);
  return start === undefined || start === '-' || now === undefined || now === start;
}

/** A breaker lock older than this was left by a process that died while breaking (held for microseconds). */
const STALE_BREAKER_MS = 10_000;

/**
 * Runs `work` while holding `lockPath` against every process (and every other caller in this one)
 * that takes the same lock: mutual exclusion, unlike withLock. The lock file appears with its
 * owner already in it (written aside, then hard-linked into place, which fails if it exists), so
 * there is no empty lock to guess about. A lock whose owner died (pid gone, or reused by a process
 * that started later) is broken under a second, short-lived lock, `<lock>.break`, and only if it
 * still holds the dead owner: two waiters can never both break it and each take one.
 */
export async function withExclusiveLock<T>(lockPath: string, work: () => Promise<T>, pollMs = 10): Promise<T> {
  const mine = `${process.pid} ${processStartTime(process.pid) ?? '-'} ${randomBytes(6).toString('hex')}\n`;
  for (;;) {
    const aside = `${lockPath}.${process.pid}.${randomBytes(6).toString('hex')}`;
    await writeFile(aside, mine);
    let taken = false;
    try {
      await link(aside, lockPath);
      taken = true;
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) throw e;
    } finally {
      await rm(aside, { force: true });
    }
    if (taken) break;
    const held = await readFile(lockPath, 'utf8').catch((e: unknown) => {
      if (isErrno(e, 'ENOENT')) return null; // released meanwhile
      throw e;
    });
    if (held === null) continue;
    if (!ownerAlive(held)) await breakStale(lockPath, held);
    await new Promise((r) => setTimeout(r, pollMs));
  }
  try {
    return await work();
  } finally {
    // only ever our own: nobody breaks a lock whose owner lives
    if ((await readFile(lockPath, 'utf8').catch(() => null)) === mine) await rm(lockPath, { force: true });
  }
}

async function breakStale(lockPath: string, dead: string): Promise<void> {
  const breaker = `${lockPath}.break`;
  try {
    await (await open(breaker, 'wx')).close();
  } catch (e) {
    if (!isErrno(e, 'EEXIST')) throw e;
    const age = await stat(breaker).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    if (age > STALE_BREAKER_MS) await rm(breaker, { force: true });
    return;
  }
  try {
    // only breakers remove a lock that is not theirs, one at a time: unchanged content is the dead owner's
    if ((await readFile(lockPath, 'utf8').catch(() => null)) === dead) await rm(lockPath, { force: true });
  } finally {
    await rm(breaker, { force: true });
  }
}
