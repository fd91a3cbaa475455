/**
 * Objects arriving while a lay-out already runs: the fetch reports each one once it is verified
 * and in place, the lay-out waits only for the one it needs next. Packs hold contents in
 * manifest order of first use, so the lay-out trails the fetch closely and the two overlap.
 *
 * Small verified objects can wait here in memory instead of in a staging file, so the lay-out
 * writes each straight into the tree with its metadata in one helper record (no file written,
 * looked up again by path four times and renamed). The memory is bounded by a budget; past it
 * objects go to disk (`hold` says no), and the fetch is held back (`room`) only while the
 * lay-out has work in memory, so the two can never wait for each other.
 */
/**
 * Held objects that are not views of a decoded frame are copied into slabs of this size (one
 * over a quarter slab gets a slab of its own): one allocation per slab instead of one per
 * object, which showed in profiles as allocation and GC time.
 */
const SLAB_BYTES = 4 << 20;
/** All the slabs a 64 MiB budget holds: fresh ones per object burst were churn (measured). */
const SPARE_SLABS = 16;

/**
 * Memory that held objects lie in: a slab they were copied into, or a decoded frame they are
 * views of. It counts against the budget whole while any of its objects is held, so objects
 * consumed out of order cannot pin more memory than the budget.
 */
interface Owner {
  readonly size: number;
  refs: number;
}

/** A decoded frame held objects are views of, kept from reuse until they are all taken. */
class Frame implements Owner {
  refs = 0;

  constructor(
    readonly size: number,
    readonly release: () => void,
    /** The retain function the frame came with, which names it. */
    readonly key: () => () => void,
  ) {}
}

class Slab implements Owner {
  readonly buf: Buffer;
  private used = 0;
  refs = 0;

  constructor(readonly size: number) {
    this.buf = Buffer.allocUnsafeSlow(size);
  }

  get room(): number {
    return this.size - this.used;
  }

  reset(): this {
    this.used = 0;
    return this;
  }

  copy(data: Uint8Array): Buffer {
    const view = this.buf.subarray(this.used, this.used + data.length);
    view.set(data);
    this.used += data.length;
    return view;
  }
}

export class Arrivals {
  private readonly arrived = new Set<string>();
  private readonly held = new Map<string, { data: Buffer; owner: Owner }>();
  /** Objects handed to the lay-out's helper still compressed, by size, until the lay-out places them. */
  private readonly withHelper = new Map<string, number>();
  /** Decoded frames held objects are views of, by the retain function that came with them. */
  private readonly frames = new Map<() => () => void, Frame>();
  private slab = new Slab(0);
  private readonly spares: Slab[] = [];
  private heldBytes = 0;
  private readonly waiting = new Map<string, Array<{ resolve: () => void; reject: (e: unknown) => void }>>();
  private roomWaiters: Array<() => void> = [];
  private failure: { error: unknown } | undefined;

  /** `budget`: bytes of object contents this may hold in memory (0: none, all go to disk). */
  constructor(private readonly budget = 0) {}

  /**
   * Keeps a verified object's bytes for the lay-out if the budget allows (always for the object
   * the lay-out waits for); false: the caller writes it to disk instead. With `retain` (see
   * ObjectSink.keep) the bytes are kept where they are, in their decoded frame, else copied.
   */
  hold(hex: string, data: Buffer, retain?: () => () => void): boolean {
    if (this.budget === 0 || this.failure !== undefined || this.held.has(hex)) return false;
    if (retain !== undefined) return this.holdView(hex, data, retain);
    // bytes this object makes count: its own buffer, a new slab, or the current one if it held none
    const own = data.length > SLAB_BYTES / 4;
    const fresh = own ? Math.max(data.length, SLAB_BYTES) : this.slab.room < data.length ? SLAB_BYTES : this.slab.refs === 0 ? this.slab.size : 0;
    if (this.heldBytes + fresh > this.budget && !this.waiting.has(hex)) return false;
    let slab = this.slab;
    // a large object has a slab of its own: a spare one when it fits (fresh memory each was churn)
    if (own) slab = data.length <= SLAB_BYTES ? (this.spares.pop()?.reset() ?? new Slab(SLAB_BYTES)) : new Slab(data.length);
    else if (slab.room < data.length) {
      // a full slab whose objects were all taken already is free again
      if (slab.refs === 0) this.spare(slab);
      slab = this.slab = this.spares.pop() ?? new Slab(SLAB_BYTES);
    }
    this.held.set(hex, { data: slab.copy(data), owner: slab });
    if (slab.refs++ === 0) this.heldBytes += slab.size;
    return true;
  }

  /**
   * Holds a view into a decoded frame: no copy, and no fresh slab memory (whose first touch,
   * while the helper fills the page cache, cost about 10 µs a page on these VMs, measured).
   */
  private holdView(hex: string, data: Buffer, retain: () => () => void): boolean {
    let frame = this.frames.get(retain);
    const fresh = frame === undefined || frame.refs === 0 ? data.buffer.byteLength : 0;
    if (this.heldBytes + fresh > this.budget && !this.waiting.has(hex)) return false;
    if (frame === undefined) {
      frame = new Frame(data.buffer.byteLength, retain(), retain);
      this.frames.set(retain, frame);
    }
    this.held.set(hex, { data, owner: frame });
    if (frame.refs++ === 0) this.heldBytes += frame.size;
    return true;
  }

  /**
   * An object whose frame went to the lay-out's helper, which decodes it and holds it until the
   * lay-out places it: it counts against the budget meanwhile, so the fetch does not run further
   * ahead of the lay-out than it would with objects held here (the helper would write the
   * excess to disk).
   */
  sent(hex: string, size: number): void {
    if (this.withHelper.has(hex)) return;
    this.withHelper.set(hex, size);
    this.heldBytes += size;
  }

  /** Whether the object is with the helper; if so the caller places it from there (once). */
  placed(hex: string): boolean {
    const size = this.withHelper.get(hex);
    if (size === undefined) return false;
    this.withHelper.delete(hex);
    this.heldBytes -= size;
    if (this.heldBytes <= this.budget / 4) this.wakeRoom();
    return true;
  }

  /** Keeps a slab no object needs for later ones: fresh memory costs page faults. */
  private spare(slab: Slab): void {
    if (slab.size === SLAB_BYTES && this.spares.length < SPARE_SLABS) this.spares.push(slab.reset());
  }

  arrive(hex: string): void {
    this.arrived.add(hex);
    const ws = this.waiting.get(hex);
    if (ws === undefined) return;
    this.waiting.delete(hex);
    for (const w of ws) w.resolve();
  }

  /** The fetch failed or ended: whoever still waits learns why (what arrived stays to be taken). */
  fail(error: unknown): void {
    this.failure = { error };
    for (const ws of this.waiting.values()) for (const w of ws) w.reject(error);
    this.waiting.clear();
    this.wakeRoom();
  }

  /**
   * undefined when the object is already there, else a promise of its arrival. Each object is
   * waited for once (the lay-out consumes it), so it is forgotten here: memory follows the
   * objects in flight, not the layer.
   */
  wait(hex: string): Promise<void> | undefined {
    if (this.arrived.delete(hex)) return undefined;
    if (this.failure !== undefined) return Promise.reject(this.failure.error);
    const p = new Promise<void>((resolve, reject) => {
      const ws = this.waiting.get(hex);
      if (ws === undefined) this.waiting.set(hex, [{ resolve, reject }]);
      else ws.push({ resolve, reject });
    });
    // the lay-out is stalled on the fetch: the fetch must not stall on the lay-out
    this.wakeRoom();
    return p;
  }

  /** An arrived object's bytes if they were held in memory (once); undefined: it is on disk. */
  take(hex: string): Buffer | undefined {
    const h = this.held.get(hex);
    if (h === undefined) return undefined;
    this.held.delete(hex);
    // the caller copies the bytes at once (into the helper's records), so memory no object
    // still needs no longer counts, and may serve again
    const o = h.owner;
    if (--o.refs === 0) {
      this.heldBytes -= o.size;
      if (o instanceof Frame) {
        this.frames.delete(o.key);
        o.release();
      } else if (o instanceof Slab && o !== this.slab) {
        this.spare(o);
      }
      if (this.heldBytes <= this.budget / 4) this.wakeRoom();
    }
    return h.data;
  }

  /**
   * Resolves once the fetch may go on: at once unless half the budget is held while the lay-out
   * is busy with it (it then frees it, or waits for an object and wakes this). The other half
   * takes what fetches already under way bring.
   */
  room(): Promise<void> | undefined {
    if (this.heldBytes <= this.budget / 2 || this.waiting.size > 0 || this.failure !== undefined) return undefined;
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  private wakeRoom(): void {
    if (this.roomWaiters.length === 0) return;
    const ws = this.roomWaiters;
    this.roomWaiters = [];
    for (const w of ws) w();
  }
}
