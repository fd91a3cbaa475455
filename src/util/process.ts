/**
 * A process's identity across pid reuse: its start time beside its pid, as state files, slots,
 * locks and leftovers record their owner. The /proc reads are synchronous: a few microseconds each.
 */
import { readFileSync } from 'node:fs';

/** /proc/<pid>/stat, or '' once the process is gone. */
export function procStat(pid: number): string {
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
