/**
 * Holding a running sandbox still while its upper dir is read (snapshot, fork). Every process of
 * the sandbox must be held: a process left running can change the tree mid-copy, and processes
 * that continue each other (SIGCONT) can outrun any sweep of SIGSTOPs.
 *
 * Where the sandbox has a freezer group (freezer.ts's caller made one at create: root always,
 * v1 `freezer` hierarchy or v2 `cgroup.freeze`), the kernel freezes the whole group at once and
 * we wait, bounded, until it reports FROZEN (v1 `freezer.state`) or `frozen 1` (v2
 * `cgroup.events`). A frozen task runs no code and cannot be woken by a signal, a new command
 * joins the group and is frozen on entry, and a task the sandbox had stopped itself stays stopped
 * through the thaw. A group that does not freeze in time (a task stuck in uninterruptible I/O) is
 * thawed and the hold fails with FreezeError (HTTP 503), never a raw 500.
 *
 * Without a freezer (rootless, no delegated group), the fallback is a SIGSTOP sweep by user
 * namespace: the sandbox's user namespace is its own and every process in it (holder, init, each
 * command and session, whatever they started) lives there. A pass stops every member it finds
 * running; the sweep ends only when two consecutive full scans agree that every member is
 * stopped, the member set is the same, and no thread of any member ran in between (its
 * schedstat count of timeslices, or its context switches, did not move). Why that is a hold: a
 * stopped thread runs again only when continued, and once continued it is running (state R) or,
 * having run, has a higher count; so each member was stopped throughout the time from its read in
 * the first scan to its read in the second, and all of them at once at the instant between the
 * two scans. At that instant nobody of the sandbox runs, so nobody can continue anyone or fork,
 * and nothing runs again until our thaw. Where it cannot: a process made during the first scan
 * and gone (exited and reaped) before the second is seen by neither, and could have continued a
 * member after that member's second read; its reaper then ran, which a third scan would see, but
 * the sweep stops at two. A ring that wins every pass makes the sweep give up after
 * MAX_FREEZE_PASSES with FreezeError. Processes the task had stopped itself are left stopped by
 * the thaw (only those we stopped are continued; pids are known with their start times).
 *
 * Overlapping holds of one sandbox (a snapshot during a fork) share one freeze, and the last
 * thaw releases it: a second sweep would take the first's stopped processes for the task's.
 */
import { readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MinisandboxError } from '../errors.js';
import type { Freezer } from './cgroup.js';
import { trySignal } from './proc.js';

/** Passes before the sweep gives up on a sandbox whose processes keep multiplying or continuing each other. */
export const MAX_FREEZE_PASSES = 200;
/** How long a freeze may take: a process in uninterruptible I/O freezes (or stops) when it returns. */
export const FREEZE_WAIT_MS = 10_000;

export class FreezeError extends MinisandboxError {
  constructor(message: string) {
    super('SANDBOX_FREEZE', message, {
      hint:
        'the sandbox could not be held still (a process stuck in the kernel, or processes that keep waking each other without a freezer ' +
        'cgroup): retry, or end its busy processes first',
    });
  }
}

/** What a hold needs to know of a sandbox: its holder (the user namespace) and its freezer, if it has one. */
export interface HoldTarget {
  holderPid: number;
  freezer?: Freezer | undefined;
}

interface ActiveFreeze {
  ready: Promise<() => void>;
  holders: number;
}

const active = new Map<string, ActiveFreeze>();

/**
 * Holds every process of the sandbox still and returns the thaw (idempotent), which releases them
 * once no other hold of the sandbox remains. Throws FreezeError (with everything thawed again)
 * when the sandbox cannot be held.
 */
export async function freezeSandbox(target: HoldTarget): Promise<() => void> {
  const key = target.freezer?.dir ?? `pid:${target.holderPid}`;
  let a = active.get(key);
  if (a === undefined) {
    const fresh: ActiveFreeze = { ready: target.freezer === undefined ? sweepHold(target.holderPid) : cgroupHold(target.freezer), holders: 0 };
    fresh.ready.catch(() => active.get(key) === fresh && active.delete(key));
    active.set(key, fresh);
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
    if (active.get(key) === mine) active.delete(key);
    thawAll();
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function readOr(file: string, fallback: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return fallback;
  }
}

/** Freezes the group and waits until the kernel says every task in it is frozen. */
export async function cgroupHold(f: Freezer, waitMs = FREEZE_WAIT_MS): Promise<() => void> {
  const [file, freeze, thawValue] = f.version === 1 ? ['freezer.state', 'FROZEN', 'THAWED'] : ['cgroup.freeze', '1', '0'];
  const frozen = (): boolean =>
    f.version === 1 ? readOr(join(f.dir, 'freezer.state'), 'gone').trim() === 'FROZEN' : /^frozen 1$/m.test(readOr(join(f.dir, 'cgroup.events'), ''));
  const thaw = (): void => {
    try {
      writeFileSync(join(f.dir, file), thawValue);
    } catch {
      // the group is gone: so is the sandbox
    }
  };
  try {
    writeFileSync(join(f.dir, file), freeze);
  } catch (e) {
    throw new FreezeError(`cannot freeze the sandbox's cgroup ${f.dir}: ${(e as Error).message}`);
  }
  const deadline = Date.now() + waitMs;
  // freezing takes microseconds unless a task is in the kernel: poll fast first
  for (let i = 0; !frozen(); i++) {
    if (Date.now() > deadline) {
      thaw();
      throw new FreezeError(`the sandbox's processes did not all freeze within ${waitMs / 1000} s (one is stuck in the kernel, in uninterruptible I/O)`);
    }
    await sleep(i < 100 ? 0 : 5);
  }
  return thaw;
}

function userNs(pid: number | string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/user`);
  } catch {
    return undefined;
  }
}

/** State letter and start time (clock ticks since boot) of a process or thread; undefined: gone. */
function procStat(path: string): { state: string; start: string } | undefined {
  const stat = readOr(`${path}/stat`, '');
  if (stat === '') return undefined;
  // the command name (field 2) may hold spaces and parentheses: fields are counted after its last `)`
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: rest[0] ?? '', start: rest[19] ?? '' };
}

const isStopped = (state: string): boolean => state === 'T' || state === 't';
const isGone = (state: string): boolean => state === 'Z' || state === 'X';

/** How often a thread has run: schedstat's timeslices, or (without CONFIG_SCHED_INFO) its context switches. */
function runCount(taskPath: string): string {
  const ss = readOr(`${taskPath}/schedstat`, '');
  if (ss !== '') return ss.trim().split(' ')[2] ?? ss;
  const st = readOr(`${taskPath}/status`, '');
  return `${/voluntary_ctxt_switches:\s*(\d+)/.exec(st)?.[1]}/${/nonvoluntary_ctxt_switches:\s*(\d+)/.exec(st)?.[1]}`;
}

/** One member as a scan saw it: whether every thread was stopped (or gone), and a fingerprint of what each thread had run and started. */
interface Seen {
  pid: number;
  held: boolean;
  print: string;
}

/** Every process in `ns` (by pid:start), the holder's thread states left out of `held`. */
function scan(ns: string, holderKey: string): Map<string, Seen> {
  const out = new Map<string, Seen>();
  for (const name of readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    const st = procStat(`/proc/${name}`);
    if (st === undefined || userNs(name) !== ns) continue;
    const key = `${name}:${st.start}`;
    let held = true;
    const print: string[] = [];
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${name}/task`);
    } catch {
      continue; // gone
    }
    for (const tid of tids) {
      const task = `/proc/${name}/task/${tid}`;
      const ts = procStat(task);
      if (ts === undefined) continue;
      if (!isStopped(ts.state) && !isGone(ts.state)) held = false;
      print.push(`${tid}=${runCount(task)}>${readOr(`${task}/children`, '').trim()}`);
    }
    out.set(key, { pid: Number(name), held: held || key === holderKey, print: print.join(' ') });
  }
  return out;
}

/** Two scans agree when they saw the same members, all held, none of whose threads ran or had children come or go. */
function agree(a: Map<string, Seen>, b: Map<string, Seen>, holderKey: string): boolean {
  if (a.size !== b.size) return false;
  for (const [k, s] of b) {
    const p = a.get(k);
    if (p === undefined || !s.held) return false;
    // the holder only waits (it is ours): it may wake, but no child of its may come or go
    const print = k === holderKey ? s.print.replace(/=[^>]*>/g, '>') : s.print;
    const prev = k === holderKey ? p.print.replace(/=[^>]*>/g, '>') : p.print;
    if (print !== prev) return false;
  }
  return true;
}

/** The SIGSTOP sweep (the fallback without a freezer; see the header for why it holds). */
export async function sweepHold(holderPid: number, waitMs = FREEZE_WAIT_MS): Promise<() => void> {
  const ns = userNs(holderPid);
  if (ns === undefined) return () => undefined;
  const holder = procStat(`/proc/${holderPid}`);
  const holderKey = `${holderPid}:${holder?.start ?? ''}`;
  /** The processes we stopped (pid:start): only they are continued. */
  const ours = new Set<string>();
  const thaw = (): void => {
    for (const key of ours) {
      const pid = Number(key.slice(0, key.indexOf(':')));
      // a pid whose process ended and was reused is not signalled
      if (`${pid}:${procStat(`/proc/${pid}`)?.start}` === key) trySignal(pid, 'SIGCONT');
    }
  };
  const deadline = Date.now() + waitMs;
  try {
    let prev: Map<string, Seen> | undefined;
    for (let pass = 0; ; pass++) {
      const cur = scan(ns, holderKey);
      if (prev !== undefined && agree(prev, cur, holderKey)) return thaw;
      const running = [...cur].filter(([, s]) => !s.held);
      if (pass >= MAX_FREEZE_PASSES || Date.now() > deadline)
        throw new FreezeError(
          `the sandbox's processes could not all be held stopped at once after ${pass} passes (${running.length} still running): ` +
            'without a freezer cgroup, processes that keep continuing each other can outrun the stops',
        );
      // a member first seen stopped was stopped by the task: it is never ours, and stays stopped
      for (const [key, s] of running) {
        ours.add(key);
        trySignal(s.pid, 'SIGSTOP');
      }
      // the stops land when each process next leaves the kernel: a short wait, then a new scan
      const stopping = running.map(([, s]) => s.pid);
      const landed = (pid: number): boolean => {
        const state = procStat(`/proc/${pid}`)?.state ?? 'X';
        return isStopped(state) || isGone(state);
      };
      for (let i = 0; i < 50 && !stopping.every(landed); i++) await sleep(i < 20 ? 0 : 1);
      // a scan that found someone running is no witness: the next clean scan is compared with the one after it
      prev = running.length === 0 ? cur : undefined;
    }
  } catch (e) {
    thaw();
    throw e;
  }
}
