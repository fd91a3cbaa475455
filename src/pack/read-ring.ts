/**
 * Memory for files read ahead of the packer: regions of one buffer, handed out and released
 * first-in first-out (the packer consumes read-ahead files in the order they were read).
 * A buffer per file (64 KiB to 4 MiB each, thousands per tree) stayed allocated until the
 * garbage collector ran and fragmented malloc's arenas; one ring holds them all.
 */
export class ReadRing {
  private buf: Buffer | null = null;
  /** Live regions, oldest first. */
  private readonly live: Array<{ start: number; end: number }> = [];
  private tail = 0;

  constructor(readonly capacity: number) {}

  /**
   * A region of `bytes` (at least 1, at most the capacity), or undefined until older regions
   * are released. Its memory is valid until it is released.
   */
  take(bytes: number): Buffer | undefined {
    if (!(bytes >= 1 && bytes <= this.capacity)) throw new RangeError(`read ring: cannot take ${bytes} of ${this.capacity} bytes`);
    this.buf ??= Buffer.allocUnsafeSlow(this.capacity);
    let at: number | undefined;
    const head = this.live[0]?.start;
    if (head === undefined) at = 0;
    else if (this.tail > head) {
      // free space is [tail, capacity) and [0, head): a region does not wrap, it starts over at 0
      if (this.tail + bytes <= this.capacity) at = this.tail;
      else if (bytes <= head) at = 0;
    } else if (this.tail + bytes <= head) at = this.tail;
    if (at === undefined) return undefined;
    this.live.push({ start: at, end: at + bytes });
    this.tail = at + bytes;
    return this.buf.subarray(at, at + bytes);
  }

  /** Releases the oldest region. */
  release(): void {
    this.live.shift();
    if (this.live.length === 0) this.tail = 0;
  }
}
