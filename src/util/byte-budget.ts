/**
 * A count of bytes a process holds for the work in flight, under a ceiling: what a server's
 * requests take for data they must hold whole (captured output, a JSON body being parsed, a file
 * read for an answer). Each request takes through an account of its own and gives everything back
 * at once when it ends, so nothing it took can leak. Past the ceiling a take is refused, and the
 * caller truncates or refuses its work instead of the process growing until the kernel kills it.
 * One object per server (tests run several): no global state.
 */

/** What a holder of bytes asks for more through: true when granted (and counted), false when not. */
export interface ByteGrant {
  take(n: number): boolean;
}

export class ByteBudget {
  private usedBytes = 0;
  private peakBytes = 0;
  /** Takes refused since the start (for /metrics). */
  refusals = 0;

  constructor(readonly capacity: number) {}

  get used(): number {
    return this.usedBytes;
  }

  /** The most held at once since the start. */
  get peak(): number {
    return this.peakBytes;
  }

  /** Takes `n` bytes if they fit under the ceiling. */
  tryTake(n: number): boolean {
    if (this.usedBytes + n > this.capacity) {
      this.refusals++;
      return false;
    }
    this.usedBytes += n;
    if (this.usedBytes > this.peakBytes) this.peakBytes = this.usedBytes;
    return true;
  }

  give(n: number): void {
    this.usedBytes = Math.max(0, this.usedBytes - n);
  }

  /** An account for one request's takes, given back together by release(). */
  account(): BudgetAccount {
    return new BudgetAccount(this);
  }
}

export class BudgetAccount implements ByteGrant {
  private held = 0;
  private released = false;

  constructor(private readonly budget: ByteBudget) {}

  /** What this account holds now. */
  get bytes(): number {
    return this.held;
  }

  take(n: number): boolean {
    // after release, whatever still runs for the request (a command being killed) takes nothing
    if (this.released || !this.budget.tryTake(n)) return false;
    this.held += n;
    return true;
  }

  /** A grant through this account that takes `copies` bytes for each byte asked: what holding it costs in all its copies. */
  weighted(copies: number): ByteGrant {
    return { take: (n) => this.take(n * copies) };
  }

  /** Gives back everything taken; later takes are refused. Idempotent. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.budget.give(this.held);
    this.held = 0;
  }
}
