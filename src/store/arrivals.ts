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
export class Arrivals {
  private readonly arrived = new Set<string>();
  private readonly held = new Map<string, Buffer>();
  private heldBytes = 0;
  private readonly waiting = new Map<string, Array<{ resolve: () => void; reject: (e: unknown) => void }>>();
  private roomWaiters: Array<() => void> = [];
  private failure: { error: unknown } | undefined;

  /** `budget`: bytes of object contents this may hold in memory (0: none, all go to disk). */
  constructor(private readonly budget = 0) {}

  /**
   * Keeps a copy of a verified object's bytes for the lay-out if the budget allows (always for
   * the object the lay-out waits for); false: the caller writes it to disk instead.
   */
  hold(hex: string, data: Uint8Array): boolean {
    if (this.failure !== undefined || this.held.has(hex)) return false;
    if (this.heldBytes + data.length > this.budget && !this.waiting.has(hex)) return false;
    this.held.set(hex, Buffer.from(data));
    this.heldBytes += data.length;
    return true;
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
    const data = this.held.get(hex);
    if (data === undefined) return undefined;
    this.held.delete(hex);
    this.heldBytes -= data.length;
    if (this.heldBytes <= this.budget / 4) this.wakeRoom();
    return data;
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
