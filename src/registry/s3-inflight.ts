/**
 * A bound on requests and bytes in flight, shared by every call of one registry instance, so a
 * node pulling thousands of objects neither opens thousands of sockets nor buffers gigabytes.
 * FIFO: a large request waiting for bytes is not starved by a stream of small ones behind it.
 */
export interface InFlightLimits {
  maxRequests: number;
  maxBytes: number;
}

interface Waiter {
  bytes: number;
  resolve: (release: () => void) => void;
}

export class InFlightBudget {
  readonly limits: InFlightLimits;
  private requests = 0;
  private bytes = 0;
  private readonly queue: Waiter[] = [];
  /** Highest concurrent requests / bytes seen: lets tests and benchmarks check the bound held. */
  peakRequests = 0;
  peakBytes = 0;

  constructor(limits: InFlightLimits) {
    if (!(limits.maxRequests >= 1) || !(limits.maxBytes >= 1)) throw new RangeError('in-flight limits must be at least 1');
    this.limits = limits;
  }

  /**
   * Waits for one request slot and `bytes` bytes. A request larger than the whole byte budget is
   * admitted alone (it is clamped), otherwise it could never run.
   */
  acquire(bytes: number): Promise<() => void> {
    const want = Math.min(Math.max(0, bytes), this.limits.maxBytes);
    return new Promise((resolve) => {
      this.queue.push({ bytes: want, resolve });
      this.pump();
    });
  }

  async run<T>(bytes: number, op: () => Promise<T>): Promise<T> {
    const release = await this.acquire(bytes);
    try {
      return await op();
    } finally {
      release();
    }
  }

  private pump(): void {
    for (;;) {
      const head = this.queue[0];
      if (head === undefined) return;
      if (this.requests >= this.limits.maxRequests || this.bytes + head.bytes > this.limits.maxBytes) return;
      this.queue.shift();
      this.requests++;
      this.bytes += head.bytes;
      this.peakRequests = Math.max(this.peakRequests, this.requests);
      this.peakBytes = Math.max(this.peakBytes, this.bytes);
      let released = false;
      head.resolve(() => {
        if (released) return;
        released = true;
        this.requests--;
        this.bytes -= head.bytes;
        this.pump();
      });
    }
  }
}
