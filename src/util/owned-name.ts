/**
 * Names of the work dirs and files a process leaves in a shared directory while it works (a
 * store's tmp dir, its layers dir): `<prefix><pid>.<start>-<rest>`, its owner's pid and start time
 * (clock ticks after boot), so that whoever finds one after its owner was killed can tell a dead
 * owner from a live one, and a live one that took the dead one's pid from the owner itself.
 * Names of code before the start time was added, `<prefix><pid>-<rest>`, are read too: their owner
 * counts as alive while its pid is (the safe side).
 */
import { processStartTime, sameProcessAlive } from './process.js';

/** `<prefix><our pid>.<our start time>-<rest>`. */
export function ownedName(prefix: string, rest: string): string {
  return `${prefix}${process.pid}.${processStartTime(process.pid) ?? '0'}-${rest}`;
}

export interface NameOwner {
  pid: number;
  /** Absent in names of older code. */
  startTime?: string;
}

/** The owner a name made by ownedName (or older code) records after `prefix`; null: not such a name. */
export function ownerOfName(name: string, prefix: string): NameOwner | null {
  if (!name.startsWith(prefix)) return null;
  const m = /^(\d+)(?:\.(\d+))?-/.exec(name.slice(prefix.length));
  if (m === null) return null;
  return m[2] === undefined ? { pid: Number(m[1]) } : { pid: Number(m[1]), startTime: m[2] };
}

/** Whether the process that made a name is gone (exited, a zombie, or its pid now another process's). */
export function ownerGone(o: NameOwner): boolean {
  if (o.pid === process.pid && o.startTime === undefined) return false;
  return !sameProcessAlive(o.pid, o.startTime);
}
