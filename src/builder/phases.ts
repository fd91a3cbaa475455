/**
 * Wall-clock time per phase of building one node, so a slow build says where its time went
 * (recorded in the node's log and in `build --json`'s `nodes[].phases`, which bench/build.ts prints).
 * Phases are sequential within a node; one that ran twice (a retried step) adds up.
 */

/** Milliseconds per phase, in the order the phases first ran. */
export type PhaseTimes = Record<string, number>;

export class PhaseClock {
  readonly times: PhaseTimes = {};

  /** `onStart`: told the name of each phase as it starts (a build's progress line shows it). */
  constructor(private readonly onStart?: (phase: string) => void) {}

  add(name: string, ms: number): void {
    this.times[name] = (this.times[name] ?? 0) + ms;
  }

  async time<T>(name: string, f: () => Promise<T>): Promise<T> {
    this.onStart?.(name);
    const t0 = performance.now();
    try {
      return await f();
    } finally {
      this.add(name, performance.now() - t0);
    }
  }

  /**
   * A progress callback that books the time between phase announcements (as pushTree's
   * onProgress makes them) to the announced phase, under `prefix`; call the returned `end` when
   * the announcing step returns or throws.
   */
  announced(prefix: string): { onPhase: (p: { phase: string }) => void; end: () => void } {
    let current: { name: string; t0: number } | null = null;
    const close = (): void => {
      if (current !== null) this.add(`${prefix}${current.name}`, performance.now() - current.t0);
      current = null;
    };
    return {
      onPhase: (p) => {
        if (current?.name === p.phase) return;
        close();
        this.onStart?.(`${prefix}${p.phase}`);
        current = { name: p.phase, t0: performance.now() };
      },
      end: close,
    };
  }
}

/** `name 1.23s, name 0.04s`: for logs and tables. */
export function formatPhases(times: PhaseTimes): string {
  return Object.entries(times)
    .map(([k, ms]) => `${k} ${(ms / 1000).toFixed(2)}s`)
    .join(', ');
}
