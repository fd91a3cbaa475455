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

/** The host pids of every `sleep <marker>` (in any sandbox). */
function sleepPids(marker: string): string[] {
  return readdirSync('/proc').filter((p) => {
    if (!/^\d+$/.test(p)) return false;
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${marker}\0`;
    } catch {
      return false;
    }
  });
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
