/**
 * Objects arriving while a lay-out already runs: the fetch reports each one once it is verified
 * and in place, the lay-out waits only for the one it needs next. Packs hold contents in
 * manifest order of first use, so the lay-out trails the fetch closely and the two overlap.
 */
export class Arrivals {
  private readonly arrived = new Set<string>();
  private readonly waiting = new Map<string, Array<{ resolve: () => void; reject: (e: unknown) => void }>>();
  private failure: { error: unknown } | undefined;

  arrive(hex: string): void {
    this.arrived.add(hex);
    const ws = this.waiting.get(hex);
    if (ws === undefined) return;
    this.waiting.delete(hex);
    for (const w of ws) w.resolve();
  }

  /** The fetch failed or ended: whoever still waits learns why. */
  fail(error: unknown): void {
    this.failure = { error };
    for (const ws of this.waiting.values()) for (const w of ws) w.reject(error);
    this.waiting.clear();
  }

  /**
   * undefined when the object is already there, else a promise of its arrival. Each object is
   * waited for once (the lay-out consumes it), so it is forgotten here: memory follows the
   * objects in flight, not the layer.
   */
  wait(hex: string): Promise<void> | undefined {
    if (this.arrived.delete(hex)) return undefined;
    if (this.failure !== undefined) return Promise.reject(this.failure.error);
    return new Promise((resolve, reject) => {
      const ws = this.waiting.get(hex);
      if (ws === undefined) this.waiting.set(hex, [{ resolve, reject }]);
      else ws.push({ resolve, reject });
    });
  }
}
