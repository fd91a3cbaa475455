/**
 * Host process helpers: identity across pid reuse (start time), liveness, descendants.
 * The single-file /proc reads are synchronous: a few microseconds each, on the sandbox start and
 * destroy paths where a thread-pool round trip per read cost more than the read.
 */
import { readFile, readdir } from 'node:fs/promises';
import { procStat } from '../util/process.js';

export { processStartTime, sameProcessAlive } from '../util/process.js';

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
