/**
 * Host process helpers: identity across pid reuse (start time), liveness, descendants.
 */
import { readFile, readdir } from 'node:fs/promises';

/** The process's start time in clock ticks since boot, or undefined if it is gone. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Field 22; the command name (field 2) may hold spaces and parentheses, so count from the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19];
  } catch {
    return undefined;
  }
}

/** Alive and the same process as recorded (not a reused pid). */
export async function sameProcessAlive(pid: number, startTime: string | undefined): Promise<boolean> {
  if (pid <= 0) return false;
  const now = await processStartTime(pid);
  if (now === undefined) return false;
  if ((await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')).slice(-200).includes(') Z ')) return false;
  return startTime === undefined || now === startTime;
}

export async function childrenOf(pid: number): Promise<number[]> {
  const out: number[] = [];
  let tasks: string[];
  try {
    tasks = await readdir(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const t of tasks) {
    try {
      const text = await readFile(`/proc/${pid}/task/${t}/children`, 'utf8');
      for (const c of text.trim().split(/\s+/)) if (c !== '') out.push(Number(c));
    } catch {
      // task ended
    }
  }
  return out;
}

/** All descendants, parents before children. */
export async function descendantsOf(pid: number): Promise<number[]> {
  const out: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const p = queue.shift()!;
    for (const c of await childrenOf(p)) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

export function trySignal(pid: number, signal: NodeJS.Signals): 'ok' | 'gone' | 'denied' {
  try {
    process.kill(pid, signal);
    return 'ok';
  } catch (e) {
    return (e as { code?: string }).code === 'EPERM' ? 'denied' : 'gone';
  }
}
