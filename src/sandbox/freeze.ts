/**
 * Holding a running sandbox still while its upper dir is read (snapshot, fork): every process of
 * the sandbox is stopped with SIGSTOP and continued afterwards. A sandbox has a cgroup only when it
 * has limits, so the cgroup freezer cannot be relied on; its user namespace, though, is its own and
 * every process in it (the holder, init, each command and session, whatever they started) lives
 * there, so the namespace identifies them all.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { trySignal } from './proc.js';

function userNs(pid: number | string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/user`);
  } catch {
    return undefined;
  }
}

function isStoppedOrGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'T' || state === 't' || state === 'Z' || state === 'X';
  } catch {
    return true;
  }
}

/** Host pids of the processes in `ns`, but `skip`. */
function membersOf(ns: string, skip: Set<number>): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    const pid = Number(name);
    if (skip.has(pid)) continue;
    if (userNs(name) === ns) out.push(pid);
  }
  return out;
}

/**
 * Stops every process in the user namespace of `holderPid` (the sandbox's) and returns the thaw.
 * Scans again until a scan finds nobody new: a process forked between two scans is stopped by the
 * next, and a stopped process forks no more. The holder itself is left running (it only waits).
 */
export async function freezeSandbox(holderPid: number): Promise<() => void> {
  const ns = userNs(holderPid);
  const stopped = new Set<number>([holderPid]);
  if (ns === undefined) return () => undefined;
  for (let round = 0; round < 100; round++) {
    const fresh = membersOf(ns, stopped);
    if (fresh.length === 0) break;
    for (const pid of fresh) {
      trySignal(pid, 'SIGSTOP');
      stopped.add(pid);
    }
  }
  stopped.delete(holderPid);
  // SIGSTOP takes effect when the process next leaves the kernel: wait until each shows as stopped,
  // so no write in flight lands after the caller starts reading.
  for (let i = 0; i < 2000; i++) {
    if ([...stopped].every((pid) => isStoppedOrGone(pid))) break;
    await new Promise((r) => setTimeout(r, 1));
  }
  return () => {
    for (const pid of stopped) trySignal(pid, 'SIGCONT');
  };
}
