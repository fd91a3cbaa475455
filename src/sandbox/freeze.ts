/**
 * Holding a running sandbox still while its upper dir is read (snapshot, fork): every process of
 * the sandbox is stopped with SIGSTOP and continued afterwards. A sandbox has a cgroup only when it
 * has limits (and on a cgroup v1 host not in the freezer hierarchy), so the cgroup freezer cannot
 * be relied on; its user namespace, though, is its own and every process in it (the holder, init,
 * each command and session, whatever they started) lives there, so the namespace identifies them.
 *
 * The sweep holds against a task that keeps forking: a pass stops everyone it finds and waits until
 * each has stopped (SIGSTOP lands when the process next leaves the kernel, and a process with a stop
 * pending cannot complete a fork), so a pass that then finds nobody new has them all. Processes are
 * known by pid and start time, so a pid reused by a new process is not taken for a stopped one.
 * Processes the task had stopped itself are left stopped by the thaw. Overlapping freezes of one
 * sandbox (a snapshot during a fork) share one sweep, and the last thaw continues the processes:
 * a second sweep would take the first's stopped processes for the task's, or thaw them early.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { MinisandboxError } from '../errors.js';
import { trySignal } from './proc.js';

/** Passes before the sweep gives up on a sandbox whose processes keep multiplying. */
export const MAX_FREEZE_PASSES = 64;
/** How long one pass waits for its stops to land: a process in uninterruptible I/O stops when it returns. */
const STOP_WAIT_MS = 30_000;

export class FreezeError extends MinisandboxError {
  constructor(message: string) {
    super('SANDBOX_FREEZE', message, {
      hint: 'the sandbox keeps starting processes faster than they can be stopped (or one is stuck in the kernel): retry, or end its busy processes first',
    });
  }
}

function userNs(pid: number | string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/user`);
  } catch {
    return undefined;
  }
}

/** State letter and start time (clock ticks since boot) of a process; undefined: gone. */
function procStat(pid: number): { state: string; start: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may hold spaces and parentheses: fields are counted after its last `)`
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: rest[0] ?? '', start: rest[19] ?? '' };
  } catch {
    return undefined;
  }
}

const isStopped = (state: string): boolean => state === 'T' || state === 't';
const isGone = (state: string): boolean => state === 'Z' || state === 'X';

/** A process's identity: a pid reused later is another process. */
type Key = string;

interface Member {
  pid: number;
  key: Key;
  state: string;
}

/** The processes in `ns` not among `known`. */
function newMembers(ns: string, known: Set<Key>): Member[] {
  const out: Member[] = [];
  for (const name of readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    const pid = Number(name);
    const st = procStat(pid);
    if (st === undefined) continue;
    const key = `${pid}:${st.start}`;
    if (known.has(key) || userNs(name) !== ns) continue;
    // read again after the namespace check: a process could have exec'd or stopped meanwhile
    out.push({ pid, key, state: procStat(pid)?.state ?? 'X' });
  }
  return out;
}

/** Whether the process `m` names is stopped, or gone (or its pid is someone else's now). */
function stoppedOrGone(m: Member): boolean {
  const st = procStat(m.pid);
  return st === undefined || `${m.pid}:${st.start}` !== m.key || isStopped(st.state) || isGone(st.state);
}

interface ActiveFreeze {
  ready: Promise<() => void>;
  holders: number;
}

const active = new Map<number, ActiveFreeze>();

/**
 * Stops every process in the user namespace of `holderPid` (the sandbox's) and returns the thaw
 * (idempotent), which continues exactly the processes stopped here once no other freeze of the
 * sandbox holds it. The holder itself is left running (it only waits). Throws FreezeError (with
 * everything it stopped continued) when the sweep cannot converge.
 */
export async function freezeSandbox(holderPid: number): Promise<() => void> {
  let a = active.get(holderPid);
  if (a === undefined) {
    const fresh: ActiveFreeze = { ready: sweep(holderPid), holders: 0 };
    fresh.ready.catch(() => active.get(holderPid) === fresh && active.delete(holderPid));
    active.set(holderPid, fresh);
    a = fresh;
  }
  const mine = a;
  mine.holders++;
  let thawAll: () => void;
  try {
    thawAll = await mine.ready;
  } catch (e) {
    mine.holders--;
    throw e;
  }
  let done = false;
  return () => {
    if (done) return;
    done = true;
    if (--mine.holders > 0) return;
    if (active.get(holderPid) === mine) active.delete(holderPid);
    thawAll();
  };
}

async function sweep(holderPid: number): Promise<() => void> {
  const ns = userNs(holderPid);
  if (ns === undefined) return () => undefined;
  const holder = procStat(holderPid);
  const known = new Set<Key>(holder === undefined ? [] : [`${holderPid}:${holder.start}`]);
  const ours: Member[] = [];
  const thaw = (): void => {
    // a pid whose process ended and was reused is not signalled
    for (const m of ours) if (procStat(m.pid)?.start === m.key.slice(m.key.indexOf(':') + 1)) trySignal(m.pid, 'SIGCONT');
  };
  try {
    for (let pass = 0; ; pass++) {
      const fresh = newMembers(ns, known);
      if (fresh.length === 0) return thaw;
      if (pass >= MAX_FREEZE_PASSES)
        throw new FreezeError(`the sandbox's processes were still multiplying after ${MAX_FREEZE_PASSES} passes of stopping them (${fresh.length} new)`);
      const sent: Member[] = [];
      for (const m of fresh) {
        known.add(m.key);
        // stopped by the task itself (or a tracer): it stays stopped after the thaw
        if (isStopped(m.state) || isGone(m.state)) continue;
        trySignal(m.pid, 'SIGSTOP');
        sent.push(m);
        ours.push(m);
      }
      // no new scan until this pass's stops have landed: a process still running could fork after it
      const deadline = Date.now() + STOP_WAIT_MS;
      for (let waiting = sent; ; ) {
        waiting = waiting.filter((m) => !stoppedOrGone(m));
        if (waiting.length === 0) break;
        if (Date.now() > deadline) throw new FreezeError(`process ${waiting[0]!.pid} of the sandbox did not stop within ${STOP_WAIT_MS / 1000} s`);
        await new Promise((r) => setTimeout(r, 1));
      }
    }
  } catch (e) {
    thaw();
    throw e;
  }
}
