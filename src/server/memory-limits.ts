/**
 * The bounds on what a server holds in memory for requests: apart from manager.ts so that
 * `serve`'s option defaults come from here without the CLI loading the server's code.
 */
export interface MemoryLimits {
  /**
   * Bytes held at once for requests' data that must be whole in memory: output captured by
   * running execs and session runs (past each stream's first 64 KiB), JSON bodies being read,
   * files read for SWE-ReX's read_file, listings. Past it, output is truncated (and said so) and
   * other such work is refused (429 with a Retry-After).
   */
  budgetBytes: number;
  /** The largest `max_output` an exec or session run may ask for, per stream (more is refused, 422). */
  maxOutputBytes: number;
}

export const DEFAULT_MEMORY_LIMITS: MemoryLimits = { budgetBytes: 1 << 30, maxOutputBytes: 64 << 20 };
