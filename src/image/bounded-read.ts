/**
 * One HTTP exchange with a registry, watched from the request to the last byte of its body, so
 * that no registry, broken or hostile, holds the importer for long or fills its memory:
 *
 * - silence: while a byte is awaited (the status line and headers included), at most
 *   `silenceMs` may pass without one. Time the consumer spends on a chunk does not count: a slow
 *   disk is not a slow registry.
 * - drips: a silence limit alone lets a server send one byte just before each limit forever.
 *   Documents (manifests, configs, tokens: small, read whole) must be whole within `deadlineMs`;
 *   streams (layer blobs, any size) must bring `minBytesPerSecond` on average over every
 *   `silenceMs` of waiting, the way curl's low-speed limit works.
 * - size: a document is read into memory only up to its cap, counted on the bytes received,
 *   whatever Content-Length says or does not say (a chunked body has none).
 *
 * A bound that trips aborts the request (the socket is closed) and surfaces as a `ReadStalled`,
 * which the client retries and finally reports with the registry's name.
 */

export interface ReadBounds {
  /** Most milliseconds with no byte arriving while one is awaited. */
  silenceMs: number;
  /** Most milliseconds for the whole exchange, request to last byte (documents). */
  deadlineMs?: number;
  /** Least average rate while bytes are awaited, over each `silenceMs` of waiting (streams). */
  minBytesPerSecond?: number;
}

export type StallKind = 'silent' | 'slow' | 'deadline';

/** A bound of ReadBounds tripped: the exchange was aborted. Retryable; `message` says which bound. */
export class ReadStalled extends Error {
  constructor(
    readonly kind: StallKind,
    message: string,
  ) {
    super(message);
    this.name = 'ReadStalled';
  }

  /** The same stall, said of `where` (e.g. the token server of a registry). */
  of(where: string): ReadStalled {
    return new ReadStalled(this.kind, `${where}: ${this.message}`);
  }
}

const seconds = (ms: number): string => `${Number((ms / 1000).toFixed(3))} s`;

/** A body passed the bytes its reader allows: `received` is how many had come when it stopped. */
export type TooLarge = (received: number) => Error;

export class Exchange {
  private reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  private closed = false;

  private constructor(
    private readonly watch: Watch,
    readonly res: Response,
  ) {}

  /** Sends the request; resolves once its answer's headers came, or rejects with ReadStalled or fetch's own error. */
  static async open(url: string | URL, init: RequestInit, bounds: ReadBounds): Promise<Exchange> {
    const watch = new Watch(bounds);
    try {
      return new Exchange(watch, await watch.waiting(() => fetch(url, { ...init, signal: watch.signal })));
    } catch (e) {
      watch.stop();
      throw watch.stalled ?? e;
    }
  }

  get status(): number {
    return this.res.status;
  }

  header(name: string): string | null {
    return this.res.headers.get(name);
  }

  /** The body as it arrives, under the bounds; the exchange is closed when the iteration ends. */
  async *chunks(): AsyncGenerator<Buffer> {
    if (this.res.body === null) return this.close();
    const reader = this.res.body.getReader();
    this.reader = reader;
    try {
      for (;;) {
        const r = await this.watch.waiting(() => reader.read());
        if (r.done) return;
        this.watch.got(r.value.byteLength);
        yield Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
      }
    } catch (e) {
      throw this.watch.stalled ?? e;
    } finally {
      this.close();
    }
  }

  /** The whole body, refused with `tooLarge` as soon as more than `max` bytes came. */
  async readAll(max: number, tooLarge: TooLarge): Promise<Buffer> {
    const parts: Buffer[] = [];
    let n = 0;
    for await (const b of this.chunks()) {
      n += b.length;
      if (n > max) throw tooLarge(n);
      parts.push(b);
    }
    return Buffer.concat(parts, n);
  }

  /** At most the first `max` bytes of the body (an error's text), the rest left unread. */
  async readSome(max: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    let n = 0;
    try {
      for await (const b of this.chunks()) {
        parts.push(b);
        n += b.length;
        if (n >= max) break;
      }
    } catch {
      // an error answer whose text cannot be read is still that error
    }
    return Buffer.concat(parts, n).subarray(0, max);
  }

  /** Stops the watch and the transfer (unread body bytes are discarded with the connection). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.watch.stop();
    if (this.reader !== undefined) this.reader.cancel().catch(() => undefined);
    else this.res.body?.cancel().catch(() => undefined);
  }
}

/** The timers of one exchange: the silence timer is armed only while a byte is awaited. */
class Watch {
  private readonly controller = new AbortController();
  stalled: ReadStalled | undefined;
  private silence: NodeJS.Timeout | undefined;
  private readonly deadline: NodeJS.Timeout | undefined;
  private waitedMs = 0;
  private windowBytes = 0;
  private total = 0;

  constructor(private readonly bounds: ReadBounds) {
    if (bounds.deadlineMs !== undefined) {
      this.deadline = setTimeout(
        () => this.trip('deadline', `not whole within ${seconds(bounds.deadlineMs!)} (${this.total} bytes had come)`),
        bounds.deadlineMs,
      );
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Runs `op` (a wait for the network) with the silence timer armed. */
  async waiting<T>(op: () => Promise<T>): Promise<T> {
    if (this.stalled !== undefined) throw this.stalled;
    const t0 = Date.now();
    this.silence = setTimeout(() => this.trip('silent', `no byte for ${seconds(this.bounds.silenceMs)}`), this.bounds.silenceMs);
    try {
      return await op();
    } finally {
      clearTimeout(this.silence);
      this.silence = undefined;
      this.waitedMs += Date.now() - t0;
    }
  }

  /** Counts bytes that came, and checks the rate once a window of waiting has passed. */
  got(n: number): void {
    this.total += n;
    this.windowBytes += n;
    const min = this.bounds.minBytesPerSecond;
    if (min === undefined || this.waitedMs < this.bounds.silenceMs) return;
    if (this.windowBytes * 1000 < min * this.waitedMs) {
      this.trip('slow', `slower than ${min} bytes/s (${this.windowBytes} bytes in ${seconds(this.waitedMs)} of waiting)`);
      throw this.stalled;
    }
    this.waitedMs = 0;
    this.windowBytes = 0;
  }

  private trip(kind: StallKind, message: string): void {
    if (this.stalled !== undefined) return;
    this.stalled = new ReadStalled(kind, message);
    this.controller.abort(this.stalled);
  }

  stop(): void {
    clearTimeout(this.silence);
    clearTimeout(this.deadline);
  }
}
