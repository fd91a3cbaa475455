/**
 * The external merge sort behind a layer's conversion: a tar is not sorted and a manifest is,
 * so entry records (path bytes, tar sequence number, kind, payload) are gathered into runs of a
 * bounded number of records, each run sorted by (path bytes, sequence) and spilled to a
 * temporary file, then the runs are merged back in order, k at once. Memory is one run while
 * gathering, one record and a 64 KiB read buffer per run while merging (ARCHITECTURE.md: bounded
 * memory). The merge is one level: a layer of 10 million entries would merge ~600 runs at once
 * (~40 MiB of read buffers and as many open files); beyond that a multi-level merge is needed.
 */
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const Kind = {
  File: 0,
  Dir: 1,
  /** symlink, fifo, device: an entry that is neither a file nor a directory. */
  Other: 2,
  /** a hardlink; its payload is the target's path bytes. */
  Link: 3,
  /** `.wh.NAME`: the payload is empty. */
  Whiteout: 4,
  /** `DIR/.wh..wh..opq`, recorded on DIR: the payload is empty. */
  Opaque: 5,
  /**
   * A directory an entry below it needs at that point of the tar, recorded on the directory
   * (when it is not known to be one already): a layer that has no entry for it implies it. The
   * payload is empty.
   */
  Parent: 6,
} as const;
export type Kind = (typeof Kind)[keyof typeof Kind];

export interface Rec {
  /** The path's bytes (the manifest's sort key). */
  raw: Buffer;
  /** The entry's position in the tar: later ones win. */
  seq: number;
  kind: Kind;
  /** An entry's canonical manifest line (utf-8), a hardlink's target bytes, or nothing. */
  payload: Buffer;
}

const cmp = (a: Rec, b: Rec): number => Buffer.compare(a.raw, b.raw) || a.seq - b.seq;

const HEAD = 13; // u32 path length, u32 seq, u8 kind, u32 payload length

export class RunSorter {
  private buf: Rec[] = [];
  private readonly runs: string[] = [];
  /** Most records held in memory at once (the run buffer). */
  maxHeld = 0;

  constructor(
    private readonly dir: string,
    private readonly runRecords: number,
  ) {}

  get spilled(): number {
    return this.runs.length;
  }

  async add(r: Rec): Promise<void> {
    this.buf.push(r);
    if (this.buf.length > this.maxHeld) this.maxHeld = this.buf.length;
    if (this.buf.length >= this.runRecords) await this.spill();
  }

  private async spill(): Promise<void> {
    this.buf.sort(cmp);
    const parts: Buffer[] = [];
    for (const r of this.buf) {
      const h = Buffer.allocUnsafe(HEAD);
      h.writeUInt32LE(r.raw.length, 0);
      h.writeUInt32LE(r.seq, 4);
      h.writeUInt8(r.kind, 8);
      h.writeUInt32LE(r.payload.length, 9);
      parts.push(h, r.raw, r.payload);
    }
    const file = join(this.dir, `run-${this.runs.length}`);
    await writeFile(file, Buffer.concat(parts), { mode: 0o600 });
    this.runs.push(file);
    this.buf = [];
  }

  /**
   * After the last add. A layer that fit in one run stays in memory; otherwise the rest is
   * spilled too, so a merge holds one record per run (plus the group being resolved).
   */
  async seal(): Promise<void> {
    if (this.runs.length > 0 && this.buf.length > 0) await this.spill();
    else this.buf.sort(cmp);
  }

  /** Every record in (path bytes, sequence) order; may be called more than once after seal(). */
  async *merged(): AsyncGenerator<Rec> {
    const sources: Array<AsyncIterator<Rec> | Iterator<Rec>> = [...this.runs.map((f) => readRun(f)), this.buf[Symbol.iterator]()];
    const heap: Array<{ r: Rec; s: number }> = [];
    const up = (i: number): void => {
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (cmp(heap[p]!.r, heap[i]!.r) <= 0) return;
        [heap[p], heap[i]] = [heap[i]!, heap[p]!];
        i = p;
      }
    };
    const down = (i: number): void => {
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && cmp(heap[l]!.r, heap[m]!.r) < 0) m = l;
        if (r < heap.length && cmp(heap[r]!.r, heap[m]!.r) < 0) m = r;
        if (m === i) return;
        [heap[m], heap[i]] = [heap[i]!, heap[m]!];
        i = m;
      }
    };
    this.maxHeld = Math.max(this.maxHeld, this.buf.length + this.runs.length);
    for (let s = 0; s < sources.length; s++) {
      const n = await sources[s]!.next();
      if (n.done !== true) {
        heap.push({ r: n.value, s });
        up(heap.length - 1);
      }
    }
    while (heap.length > 0) {
      const top = heap[0]!;
      yield top.r;
      const n = await sources[top.s]!.next();
      if (n.done !== true) {
        heap[0] = { r: n.value, s: top.s };
      } else {
        const last = heap.pop()!;
        if (heap.length === 0) break;
        heap[0] = last;
      }
      down(0);
    }
  }
}

async function* readRun(file: string): AsyncGenerator<Rec> {
  const fh = await open(file, 'r');
  try {
    let carry = Buffer.alloc(0);
    const chunk = Buffer.allocUnsafe(1 << 16);
    for (;;) {
      const { bytesRead } = await fh.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      let b = carry.length === 0 ? chunk.subarray(0, bytesRead) : Buffer.concat([carry, chunk.subarray(0, bytesRead)]);
      let at = 0;
      while (b.length - at >= HEAD) {
        const rl = b.readUInt32LE(at);
        const pl = b.readUInt32LE(at + 9);
        if (b.length - at < HEAD + rl + pl) break;
        // copies: the read buffer is reused
        const raw = Buffer.from(b.subarray(at + HEAD, at + HEAD + rl));
        const payload = Buffer.from(b.subarray(at + HEAD + rl, at + HEAD + rl + pl));
        yield { raw, seq: b.readUInt32LE(at + 4), kind: b.readUInt8(at + 8) as Kind, payload };
        at += HEAD + rl + pl;
      }
      carry = Buffer.from(b.subarray(at));
      b = carry;
    }
    if (carry.length > 0) throw new Error(`entry run ${file} is truncated`);
  } finally {
    await fh.close();
  }
}
