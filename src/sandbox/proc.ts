/**
 * Host process helpers: identity across pid reuse (start time), liveness, descendants.
 * The single-file /proc reads are synchronous: a few microseconds each, on the sandbox start and
 * destroy paths where a thread-pool round trip per read cost more than the read.
 */
import { readFileSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';

function procStat(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return '';
  }
}

/** The process's start time in clock ticks since boot, or undefined if it is gone. */
export function processStartTime(pid: number): string | undefined {
  const stat = procStat(pid);
  if (stat === '') return undefined;
  // Field 22; the command name (field 2) may hold spaces and parentheses, so count from the last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
}

/** Alive (not a zombie) and the same process as recorded (not a reused pid). */
export function sameProcessAlive(pid: number, startTime: string | undefined): boolean {
  if (pid <= 0) return false;
  const stat = procStat(pid);
  if (stat === '') return false;
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (rest[0] === 'Z') return false;
  return startTime === undefined || rest[19] === startTime;
}

/** The parent's pid of a live process, undefined once it is gone. */
export function parentPid(pid: number): number | undefined {
  if (pid <= 0) return undefined;
  const stat = procStat(pid);
  // after the command name: state, then ppid
  return stat === '' ? undefined : Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
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
