/**
 * Start-up and phase timing for profiling the CLI: with MINISANDBOX_TIMING=1, each mark prints the
 * milliseconds since the process started (node's own start included) and this process's CPU time
 * so far (children not included: a loaded machine inflates wall time far more) on stderr. Off, a mark is one
 * comparison: it stays in the hot path of every command.
 */
const on = process.env.MINISANDBOX_TIMING === '1';

export function mark(label: string): void {
  if (!on) return;
  const cpu = process.cpuUsage();
  const ms = (n: number): string => n.toFixed(1).padStart(7);
  process.stderr.write(`timing ${ms(performance.now())} ms  cpu ${ms((cpu.user + cpu.system) / 1000)} ms  ${label}\n`);
}
