/**
 * A set of 32-byte keys (sha256 values) in one off-heap buffer: open addressing, linear probing.
 * A JS Set of hex strings costs ~100 bytes per key on the V8 heap; this costs 64-128 bytes
 * per key in a single Buffer the garbage collector never scans, which matters for
 * million-file layers. The all-zero key is the empty-slot marker (no real sha256 is all zeros,
 * and callers hash their keys first).
 */
const KEY = 32;

export class DigestSet {
  private table: Buffer;
  private slots: number;
  private count = 0;

  constructor(initialSlots = 1024) {
    let s = 16;
    while (s < initialSlots) s *= 2;
    this.slots = s;
    this.table = Buffer.alloc(s * KEY);
  }

  get size(): number {
    return this.count;
  }

  /** Adds a key; returns false if it was already present. */
  add(key: Buffer): boolean {
    if (key.length !== KEY) throw new RangeError(`DigestSet keys are ${KEY} bytes, got ${key.length}`);
    if ((this.count + 1) * 2 > this.slots) this.grow();
    const i = this.find(this.table, this.slots, key);
    if (i < 0) return false;
    key.copy(this.table, i * KEY);
    this.count++;
    return true;
  }

  has(key: Buffer): boolean {
    return key.length === KEY && this.find(this.table, this.slots, key) < 0;
  }

  /** Slot index where key can be inserted, or -1 if already present. */
  private find(table: Buffer, slots: number, key: Buffer): number {
    let i = key.readUInt32LE(0) & (slots - 1);
    for (;;) {
      const off = i * KEY;
      if (table.readBigUInt64LE(off) === 0n && isZero(table, off)) return i;
      if (table.compare(key, 0, KEY, off, off + KEY) === 0) return -1;
      i = (i + 1) & (slots - 1);
    }
  }

  private grow(): void {
    const slots = this.slots * 2;
    const table = Buffer.alloc(slots * KEY);
    for (let s = 0; s < this.slots; s++) {
      const off = s * KEY;
      if (isZero(this.table, off)) continue;
      const key = this.table.subarray(off, off + KEY);
      const i = this.find(table, slots, key);
      key.copy(table, i * KEY);
    }
    this.table = table;
    this.slots = slots;
  }
}

function isZero(b: Buffer, off: number): boolean {
  for (let k = 0; k < KEY; k += 8) if (b.readBigUInt64LE(off + k) !== 0n) return false;
  return true;
}
