/**
 * The server's Prometheus metrics, kept in one object per server (no module state, so tests can run
 * servers side by side), rendered in the text exposition format (version 0.0.4).
 */

/** Upper bounds of the exec latency buckets, in seconds: a `true` is milliseconds, a test run minutes. */
const EXEC_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800];

export class ServerMetrics {
  createsTotal = 0;
  private readonly errors = new Map<string, number>();
  private readonly execCounts = EXEC_BUCKETS.map(() => 0);
  private execCount = 0;
  private execSum = 0;

  /** An error answered to a client, by its code (`NOT_FOUND`, `CAPACITY`, `INVALID_INPUT`, ...). */
  error(kind: string): void {
    this.errors.set(kind, (this.errors.get(kind) ?? 0) + 1);
  }

  execLatency(seconds: number): void {
    this.execCount++;
    this.execSum += seconds;
    EXEC_BUCKETS.forEach((b, i) => {
      if (seconds <= b) this.execCounts[i]!++;
    });
  }

  /** `memory`: the server's memory budget (its ceiling, what it holds, what it refused). */
  render(live: number, max: number, memory?: { capacity: number; used: number; peak: number; refusals: number }): string {
    const lines = [
      '# HELP minisandbox_sandboxes_live Sandboxes this server holds now.',
      '# TYPE minisandbox_sandboxes_live gauge',
      `minisandbox_sandboxes_live ${live}`,
      '# HELP minisandbox_sandboxes_max The most sandboxes this server holds at once (--max-sandboxes).',
      '# TYPE minisandbox_sandboxes_max gauge',
      `minisandbox_sandboxes_max ${max}`,
      '# HELP minisandbox_sandbox_creates_total Sandboxes created (forks included).',
      '# TYPE minisandbox_sandbox_creates_total counter',
      `minisandbox_sandbox_creates_total ${this.createsTotal}`,
      '# HELP minisandbox_exec_duration_seconds Wall time of exec and session commands.',
      '# TYPE minisandbox_exec_duration_seconds histogram',
      ...EXEC_BUCKETS.map((b, i) => `minisandbox_exec_duration_seconds_bucket{le="${b}"} ${this.execCounts[i]}`),
      `minisandbox_exec_duration_seconds_bucket{le="+Inf"} ${this.execCount}`,
      `minisandbox_exec_duration_seconds_sum ${this.execSum}`,
      `minisandbox_exec_duration_seconds_count ${this.execCount}`,
      ...(memory === undefined
        ? []
        : [
            "# HELP minisandbox_memory_budget_bytes The memory budget for requests' data (--memory-budget).",
            '# TYPE minisandbox_memory_budget_bytes gauge',
            `minisandbox_memory_budget_bytes ${memory.capacity}`,
            '# HELP minisandbox_memory_held_bytes Bytes of the memory budget requests hold now.',
            '# TYPE minisandbox_memory_held_bytes gauge',
            `minisandbox_memory_held_bytes ${memory.used}`,
            '# HELP minisandbox_memory_held_peak_bytes The most bytes of the memory budget held at once since the start.',
            '# TYPE minisandbox_memory_held_peak_bytes gauge',
            `minisandbox_memory_held_peak_bytes ${memory.peak}`,
            '# HELP minisandbox_memory_refusals_total Takes the memory budget refused (output truncated, or a request refused).',
            '# TYPE minisandbox_memory_refusals_total counter',
            `minisandbox_memory_refusals_total ${memory.refusals}`,
          ]),
      '# HELP minisandbox_errors_total Errors answered to clients, by kind.',
      '# TYPE minisandbox_errors_total counter',
      ...[...this.errors].sort(([a], [b]) => a.localeCompare(b)).map(([k, n]) => `minisandbox_errors_total{kind="${k}"} ${n}`),
    ];
    return `${lines.join('\n')}\n`;
  }
}
