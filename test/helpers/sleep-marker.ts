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

/** Whether a `sleep <marker>` runs anywhere on the host (in any sandbox). */
export function sleepRuns(marker: string): boolean {
  return readdirSync('/proc').some((p) => {
    if (!/^\d+$/.test(p)) return false;
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${marker}\0`;
    } catch {
      return false;
    }
  });
}
