/**
 * A sandboxed process found from the host: `sleep N` with an N no other test uses at the same time
 * (test files run in parallel) is told apart by its command line in /proc. N is days of seconds, so
 * the sleep never ends by itself during a test.
 */
import { readFileSync, readdirSync } from 'node:fs';

/** A sleep duration for `sleep`, random among 300,000, so parallel tests pick different ones. */
export function sleepMarker(): string {
  return String(600_000 + Math.floor(Math.random() * 300_000));
}

/** The host pids of every process whose command line (NUL-separated, as in /proc) is `cmdline`. */
function pidsOf(cmdline: string): string[] {
  return readdirSync('/proc').filter((p) => {
    if (!/^\d+$/.test(p)) return false;
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8') === cmdline;
    } catch {
      return false;
    }
  });
}

/** The host pids of every `sleep <marker>` (in any sandbox). */
function sleepPids(marker: string): string[] {
  return pidsOf(`sleep\0${marker}\0`);
}

/** The state letter (R, S, T, ...) of a host pid, '' once it is gone. */
export function stateOf(pid: number | string): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.charAt(stat.lastIndexOf(')') + 2);
  } catch {
    return '';
  }
}

/** The states of every host process whose command line (NUL-separated) is `cmdline`. */
export function statesOf(cmdline: string): string[] {
  return pidsOf(cmdline)
    .map(stateOf)
    .filter((s) => s !== '');
}

/** Whether a `sleep <marker>` runs anywhere on the host (in any sandbox). */
export function sleepRuns(marker: string): boolean {
  return sleepPids(marker).length > 0;
}

/**
 * Whether a `sleep <marker>` is the foreground job of its terminal (its process group is the
 * terminal's: `ps` shows it with a `+`), so that a ^C typed now goes to it, not to its shell.
 */
export function sleepInForeground(marker: string): boolean {
  return sleepPids(marker).some((p) => {
    try {
      // after the command name in parentheses: state ppid pgrp session tty_nr tpgid ...
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return f[2] !== undefined && f[2] === f[5];
    } catch {
      return false;
    }
  });
}
