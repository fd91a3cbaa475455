/**
 * Fetching objects out of a pack in a registry: only the frames holding wanted objects are read,
 * neighbouring frames in one range read, large frames streamed; every object is verified before
 * it becomes visible under its final name.
 */
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { digestHex, sha256, type Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import { CorruptPackError } from './errors.js';
import { FrameExtractor, nameSome, TempNames, type FrameRef, type ObjectSink } from './frame-extract.js';
import { isValidatedEntry, PackIndexEntrySchema, TAR_BLOCK, type PackIndexEntry } from './pack-index.js';
import { MAX_BUFFERED_RANGE_BYTES, MERGE_GAP_BYTES } from './settings.js';
import { DecodePool, MAX_POOLED_FRAME_BYTES, type DecodedFrame } from './decode-pool.js';

/** Compressed bytes to decode below which a fetch decodes on its own thread. */
const POOL_DECODE_MIN_BYTES = 4 << 20;
/** Decoded bytes the worker may run ahead of the extraction (frames are at most 4 MiB but for large objects). */
const DECODE_AHEAD_BYTES = 32 << 20;

export { parsePackIndex, type PackIndex, type PackIndexEntry } from './pack-index.js';
export { privateObjectPath } from './frame-extract.js';
export { DecodePool } from './decode-pool.js';
export type { ObjectSink } from './frame-extract.js';

export interface FetchProgress {
  objects: number;
  /** Uncompressed bytes of the objects so far. */
  bytes: number;
  /** Compressed bytes of the frames whose objects came so far (each frame once). */
  compressedBytes: number;
  totalObjects: number;
  totalBytes: number;
}

export interface FetchOptions {
  /** Range reads in flight (default 4). */
  concurrency?: number;
  onProgress?: (p: FetchProgress) => void;
  /**
   * `destDir` belongs to this fetch alone (no concurrent fetcher, removed whole on failure):
   * objects verified before their first byte is written go straight to their final name,
   * without a temp name and rename each. Objects land at `privateObjectPath(destDir, hex)`.
   */
  privateDest?: boolean;
  /**
   * With privateDest: verified objects that arrive whole in memory go to this sink (which
   * writes them elsewhere, e.g. the lay-out's helper process) instead of being written here.
   */
  sink?: ObjectSink;
  /** Where frames are decoded: a worker thread, inline, or (default) a worker when there is enough to decode. */
  decoder?: 'auto' | 'worker' | 'inline';
  /** A decoding worker shared by several fetches (the caller closes it); used unless `decoder` is 'inline'. */
  decodePool?: DecodePool;
  /** Read buffers shared by several fetches, one after another (not at once). */
  readBuffers?: ReadBuffers;
  /** Called once an object is verified and under its final name (a consumer may start using it). */
  onObject?: (digest: Digest) => void;
  /**
   * Takes the frames it accepts whole and compressed, in pack order, to decode and verify
   * elsewhere (the lay-out's helper process); `take` copies the bytes at once. Their objects are
   * reported to `onObject` when handed over, not yet verified: the taker answers for that.
   */
  frameSink?: FrameSink;
}

export interface FrameSink {
  accepts(frame: FrameRef): boolean;
  /** It reads the frames it accepts itself: they are handed over without their bytes. */
  readonly reads?: boolean;
  /**
   * Frames handed over in a file instead of in memory: those the taker cannot hold decoded
   * (`needs`), and those too large to read whole (streamed there). Their compressed bytes are
   * written to a file of `dir`, handed over as `{ file, at: 0 }`.
   */
  readonly spool?: { dir: string; needs(frame: FrameRef): boolean };
  /** `compressed`: the bytes, a file holding them at `at`, or undefined when the sink reads them itself. */
  take(pack: Digest, frame: FrameRef, wanted: PackIndexEntry[], compressed: Uint8Array | { file: string; at: number } | undefined): void;
}

export interface FetchResult {
  objects: number;
  /** Bytes of object content written. */
  bytes: number;
  /** Compressed bytes read from the registry. */
  fetchedBytes: number;
  /** Range reads issued. */
  reads: number;
}

interface FrameWork {
  frame: FrameRef;
  wanted: PackIndexEntry[];
}

/** One registry read: a run of nearby frames, or one large frame to stream. */
interface RangeWork {
  offset: number;
  length: number;
  streamed: boolean;
  frames: FrameWork[];
}

/**
 * Writes each wanted object to `<destDir>/<hex>` (temp name + rename, so concurrent fetchers of
 * the same object are harmless). A corrupt object throws DigestMismatchError naming it and the
 * pack, and leaves nothing under its final name; objects already verified stay.
 */
export async function fetchObjects(
  registry: Registry,
  pack: Digest,
  entries: PackIndexEntry[],
  destDir: string,
  opts: FetchOptions = {},
): Promise<FetchResult> {
  const unique = dedupe(entries);
  const totalBytes = unique.reduce((n, e) => n + e.size, 0);
  const progress: FetchProgress = { objects: 0, bytes: 0, compressedBytes: 0, totalObjects: unique.length, totalBytes };
  const framesSeen = new Set<number>();
  const onObject = (e: PackIndexEntry): void => {
    progress.objects++;
    progress.bytes += e.size;
    if (e.size > 0 && !framesSeen.has(e.frameOffset)) {
      framesSeen.add(e.frameOffset);
      progress.compressedBytes += e.frameLength;
    }
    opts.onProgress?.({ ...progress });
    opts.onObject?.(e.digest);
  };

  // Empty objects need no bytes from the registry.
  const temps = new TempNames(destDir, opts.privateDest ?? false, opts.privateDest ? opts.sink : undefined);
  const empty = unique.filter((e) => e.size === 0);
  for (const e of empty) await writeEmpty(pack, e, temps, onObject);

  const ranges = planRanges(
    frameWork(
      pack,
      unique.filter((e) => e.size > 0),
    ),
  );
  const result: FetchResult = { objects: 0, bytes: 0, fetchedBytes: 0, reads: ranges.length };
  // A worker pays off once there is more than a little to decode (it takes tens of ms to start).
  const sink = opts.frameSink;
  const pooled = ranges
    .filter((r) => !r.streamed)
    .reduce((n, r) => n + r.frames.reduce((m, f) => (sink?.accepts(f.frame) === true ? m : m + f.frame.length), 0), 0);
  const mode = opts.decoder ?? 'auto';
  const useWorker = mode === 'worker' || (mode === 'auto' && (opts.decodePool !== undefined || pooled >= POOL_DECODE_MIN_BYTES));
  const decoder = useWorker ? (opts.decodePool ?? new DecodePool()) : undefined;
  try {
    for (const r of ranges) result.fetchedBytes += r.length;
    const concurrency = opts.concurrency ?? 4;
    await extractInOrder(registry, pack, ranges, temps, onObject, decoder, concurrency, opts.readBuffers ?? new ReadBuffers(concurrency + 1), sink);
  } finally {
    if (decoder !== opts.decodePool) await decoder?.close();
  }
  result.objects = progress.objects;
  result.bytes = progress.bytes;
  return result;
}

/** One frame on its way from a range read to the extractor. */
interface FrameJob {
  f: FrameWork;
  /** Its compressed bytes, when decoded here. */
  compressed?: Uint8Array;
  /** Its decoding in the worker, when decoded there. */
  decoded?: Promise<DecodedFrame>;
  /** The reused read buffer `compressed` lies in, given back once its last such frame is extracted. */
  lease?: { buf: Buffer; frames: number };
  /** Handed to the frame sink instead of decoded here. */
  sunk?: boolean;
}

/**
 * Read buffers reused from range to range: a fresh buffer per read (355 MiB of them in a
 * 1.2 GiB pull, measured) was fresh memory, whose page faults contend with the lay-out's on
 * these VMs, and external-memory pressure that sets off full garbage collections.
 */
export class ReadBuffers {
  private readonly spare: Buffer[] = [];

  /** `keep`: buffers kept for reuse, about the reads in flight plus one. */
  constructor(private readonly keep = 5) {}

  take(length: number): Buffer {
    const i = this.spare.findIndex((b) => b.length >= length);
    return i >= 0 ? this.spare.splice(i, 1)[0]! : Buffer.allocUnsafeSlow(Math.max(length, MAX_BUFFERED_RANGE_BYTES));
  }

  give(b: Buffer): void {
    if (this.spare.length < this.keep) this.spare.push(b);
  }
}

/**
 * Reads ranges `concurrency` at a time but extracts frames strictly in pack order, which is the
 * manifest's order of first use: objects then reach a lay-out running alongside in the order it
 * needs them, instead of four reads' objects interleaved (which left it waiting for one while
 * the others piled up). The worker decodes up to DECODE_AHEAD_BYTES ahead of the extraction.
 */
async function extractInOrder(
  registry: Registry,
  pack: Digest,
  ranges: RangeWork[],
  temps: TempNames,
  onObject: (e: PackIndexEntry) => void,
  decoder: DecodePool | undefined,
  concurrency: number,
  buffers: ReadBuffers,
  sink: FrameSink | undefined,
): Promise<void> {
  const reads = new Map<number, { read: Promise<Buffer>; into: Buffer | undefined }>();
  let issued = 0;
  const readAhead = (upTo: number): void => {
    for (; issued < ranges.length && issued <= upTo; issued++) {
      const r = ranges[issued]!;
      // a streamed range is opened when its turn comes (it needs no buffer); the sink reads its own
      if (r.streamed || unread(r)) continue;
      // a backend that returns buffers of its own (S3) would leave these unused
      const into = registry.readsIntoBuffers === true ? buffers.take(r.length) : undefined;
      const read = readRange(registry, pack, r, into);
      read.catch(() => undefined); // awaited in turn, or dropped after an earlier failure
      reads.set(issued, { read, into });
    }
  };
  const jobs = new BoundedQueue<FrameJob | RangeWork>(DECODE_AHEAD_BYTES);
  const sunk = (f: FrameWork): boolean => sink?.accepts(f.frame) === true;
  const pooled = (f: FrameWork): boolean => decoder !== undefined && f.frame.rawLength <= MAX_POOLED_FRAME_BYTES && !sunk(f);
  // ranges whose frames all go to a sink that reads them itself are not read here
  const unread = (r: RangeWork): boolean => sink?.reads === true && r.frames.every(sunk);
  const produce = async (): Promise<void> => {
    for (let i = 0; i < ranges.length && !jobs.stopped; i++) {
      readAhead(i + concurrency - 1);
      const r = ranges[i]!;
      if (unread(r)) {
        for (const f of r.frames) await jobs.put({ f, sunk: true }, 0);
        continue;
      }
      if (r.streamed) {
        await jobs.put(r, 0);
        continue;
      }
      const { read, into } = reads.get(i)!;
      const buf = await read;
      reads.delete(i);
      // frames decoded here keep their bytes in the read buffer until extracted; the worker takes a copy at once
      const lease = into === undefined ? undefined : { buf: into, frames: r.frames.filter((f) => !pooled(f)).length };
      for (const f of r.frames) {
        const start = f.frame.offset - r.offset;
        const compressed = buf.subarray(start, start + f.frame.length);
        if (pooled(f)) {
          const decoded = decoder!.decode(
            compressed,
            f.frame.rawLength,
            f.wanted.map((w): [number, number] => [w.offset, w.size]),
          );
          decoded.catch(() => undefined); // reported by the extractor in turn
          await jobs.put({ f, decoded }, f.frame.rawLength);
        } else {
          await jobs.put({ f, compressed, lease, sunk: sunk(f) }, f.frame.rawLength);
        }
      }
      if (lease?.frames === 0) buffers.give(lease.buf);
    }
  };
  const producing = produce().then(
    () => jobs.end(),
    (e: unknown) => jobs.fail(e),
  );
  try {
    for (let job = await jobs.take(); job !== undefined; job = await jobs.take()) {
      if ('streamed' in job) {
        const f = job.frames[0]!;
        if (sink?.spool !== undefined && sink.accepts(f.frame)) {
          sink.take(pack, f.frame, f.wanted, { file: await spoolStreamed(registry, pack, job, sink.spool.dir), at: 0 });
          for (const w of f.wanted) onObject(w);
          await temps.sink?.pump();
        } else {
          await fetchStreamed(registry, pack, job, temps, onObject);
        }
        continue;
      }
      if (job.sunk === true) {
        const { frame, wanted } = job.f;
        const spooled = job.compressed !== undefined && sink!.spool?.needs(frame) === true;
        sink!.take(pack, frame, wanted, spooled ? { file: await spoolBytes(sink!.spool!.dir, pack, frame.offset, job.compressed!), at: 0 } : job.compressed);
        for (const w of wanted) onObject(w);
      } else {
        const x = new FrameExtractor(pack, job.f.frame, job.f.wanted, temps, onObject);
        if (job.decoded !== undefined) await x.pushDecoded(job.decoded);
        else await x.push(job.compressed!);
        await x.end();
      }
      // every object is copied or written by now: the frame's memory can serve another
      if (job.decoded !== undefined) decoder!.release((await job.decoded).data);
      if (job.lease !== undefined && --job.lease.frames === 0) buffers.give(job.lease.buf);
      jobs.done(job.f.frame.rawLength);
      await temps.sink?.pump();
    }
  } finally {
    jobs.stop();
    await producing;
  }
}

/** The file of `dir` a frame of `pack` at `offset` is spooled to. */
function spoolPath(dir: string, pack: Digest, offset: number): string {
  return join(dir, `frame-${digestHex(pack).slice(0, 16)}-${offset}`);
}

/** Writes a frame's compressed bytes, read already, to its spool file. */
async function spoolBytes(dir: string, pack: Digest, offset: number, compressed: Uint8Array): Promise<string> {
  const file = spoolPath(dir, pack, offset);
  await writeFile(file, compressed, { mode: 0o600, flag: 'wx' });
  return file;
}

/** Writes a streamed range's compressed bytes to its spool file; a short read names the objects it loses. */
async function spoolStreamed(registry: Registry, pack: Digest, r: RangeWork, dir: string): Promise<string> {
  const file = spoolPath(dir, pack, r.offset);
  const stream: Readable = await registry.openBlob(pack, { offset: r.offset, length: r.length });
  const out = await open(file, 'wx', 0o600);
  let got = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      // a backend sending more than asked must not make foreign bytes part of this frame
      const usable = got + chunk.length > r.length ? chunk.subarray(0, r.length - got) : chunk;
      await out.write(usable);
      got += usable.length;
      if (got >= r.length) break;
    }
  } finally {
    stream.destroy();
    await out.close();
  }
  if (got !== r.length) {
    const lost = r.frames.flatMap((f) => f.wanted.map((w) => w.digest));
    throw new CorruptPackError(
      `pack ${pack}: read of ${r.length} bytes at ${r.offset} returned ${got} (truncated pack?); objects not extracted: ${nameSome(lost)}`,
    );
  }
  return file;
}

/** Reads one buffered range whole; a short read names the objects it loses. */
async function readRange(registry: Registry, pack: Digest, r: RangeWork, into: Buffer | undefined): Promise<Buffer> {
  const buf = await registry.getBlobRange(pack, r.offset, r.length, into);
  if (buf.length !== r.length) {
    const lost = r.frames.filter((f) => f.frame.offset + f.frame.length > r.offset + buf.length).flatMap((f) => f.wanted.map((w) => w.digest));
    throw new CorruptPackError(
      `pack ${pack}: read of ${r.length} bytes at ${r.offset} returned ${buf.length} (truncated pack?); objects not extracted: ${nameSome(lost)}`,
    );
  }
  return buf;
}

/**
 * A queue between one producer and one consumer, holding items of up to about `bound` bytes:
 * `put` waits while more is queued or being consumed (an item alone always goes through).
 */
class BoundedQueue<T> {
  private readonly items: T[] = [];
  private bytes = 0;
  private ended = false;
  private failure: { error: unknown } | undefined;
  stopped = false;
  private wakeTaker: (() => void) | undefined;
  private wakePutter: (() => void) | undefined;

  constructor(private readonly bound: number) {}

  async put(item: T, size: number): Promise<void> {
    while (this.bytes > 0 && this.bytes + size > this.bound && !this.stopped) await new Promise<void>((r) => (this.wakePutter = r));
    if (this.stopped) return;
    this.items.push(item);
    this.bytes += size;
    this.wake('taker');
  }

  /** The next item, undefined at the end; throws the producer's failure in turn. */
  async take(): Promise<T | undefined> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) return item;
      if (this.failure !== undefined) throw this.failure.error;
      if (this.ended) return undefined;
      await new Promise<void>((r) => (this.wakeTaker = r));
    }
  }

  /** An item taken earlier is consumed: its bytes no longer count. */
  done(size: number): void {
    this.bytes -= size;
    this.wake('putter');
  }

  end(): void {
    this.ended = true;
    this.wake('taker');
  }

  fail(error: unknown): void {
    this.failure = { error };
    this.wake('taker');
  }

  /** The consumer is gone: the producer's puts return at once and it stops. */
  stop(): void {
    this.stopped = true;
    this.items.length = 0;
    this.wake('putter');
  }

  private wake(who: 'taker' | 'putter'): void {
    const w = who === 'taker' ? this.wakeTaker : this.wakePutter;
    if (who === 'taker') this.wakeTaker = undefined;
    else this.wakePutter = undefined;
    w?.();
  }
}

function dedupe(entries: PackIndexEntry[]): PackIndexEntry[] {
  const seen = new Map<Digest, PackIndexEntry>();
  for (const e of entries) {
    if (isValidatedEntry(e)) {
      seen.set(e.digest, e);
      continue;
    }
    const r = PackIndexEntrySchema.safeParse(e);
    if (!r.success) throw new InvalidInputError(`invalid pack index entry for ${String(e.digest)}: ${r.error.issues[0]?.message ?? ''}`);
    if (e.offset + e.size > e.frameRawLength) throw new InvalidInputError(`pack index entry ${e.digest} ends past its frame`);
    seen.set(e.digest, r.data);
  }
  return [...seen.values()];
}

async function writeEmpty(pack: Digest, e: PackIndexEntry, temps: TempNames, onObject: (e: PackIndexEntry) => void): Promise<void> {
  const actual = sha256(new Uint8Array(0));
  if (actual !== e.digest) throw new DigestMismatchError(`object ${e.digest} in pack ${pack}`, e.digest, actual);
  await temps.publish(e.digest, Buffer.alloc(0));
  onObject(e);
}

/** The frames holding `entries`, each with its wanted objects sorted by offset (checked as fetchObjects checks them). */
export function framesOf(pack: Digest, entries: PackIndexEntry[]): Array<{ frame: FrameRef; wanted: PackIndexEntry[] }> {
  return frameWork(pack, dedupe(entries));
}

/** Groups entries by frame, rejecting entries whose frames or objects overlap (hostile input). */
function frameWork(pack: Digest, entries: PackIndexEntry[]): FrameWork[] {
  const byFrame = new Map<number, FrameWork>();
  for (const e of entries) {
    let w = byFrame.get(e.frameOffset);
    if (!w) {
      w = { frame: { offset: e.frameOffset, length: e.frameLength, rawLength: e.frameRawLength }, wanted: [] };
      byFrame.set(e.frameOffset, w);
    } else if (w.frame.length !== e.frameLength || w.frame.rawLength !== e.frameRawLength) {
      throw new CorruptPackError(`pack ${pack}: entries disagree about the frame at ${e.frameOffset}`);
    }
    w.wanted.push(e);
  }
  const frames = [...byFrame.values()].sort((a, b) => a.frame.offset - b.frame.offset);
  let end = 0;
  for (const f of frames) {
    if (f.frame.offset < end) throw new CorruptPackError(`pack ${pack}: frames at ${f.frame.offset} and before overlap`);
    end = f.frame.offset + f.frame.length;
    f.wanted.sort((a, b) => a.offset - b.offset);
    let objEnd = 0;
    for (const o of f.wanted) {
      if (o.offset < objEnd + TAR_BLOCK) throw new CorruptPackError(`pack ${pack}: object ${o.digest} overlaps another in the frame at ${f.frame.offset}`);
      objEnd = o.offset + o.size;
    }
  }
  return frames;
}

/** Coalesces frames into few reads: neighbours within MERGE_GAP_BYTES share a buffered read. */
function planRanges(frames: FrameWork[]): RangeWork[] {
  const ranges: RangeWork[] = [];
  let cur: RangeWork | null = null;
  for (const f of frames) {
    const { offset, length } = f.frame;
    if (length > MAX_BUFFERED_RANGE_BYTES) {
      ranges.push({ offset, length, streamed: true, frames: [f] });
      continue;
    }
    const end = offset + length;
    if (cur && offset - (cur.offset + cur.length) <= MERGE_GAP_BYTES && end - cur.offset <= MAX_BUFFERED_RANGE_BYTES) {
      cur.length = end - cur.offset;
      cur.frames.push(f);
    } else {
      cur = { offset, length, streamed: false, frames: [f] };
      ranges.push(cur);
    }
  }
  return ranges;
}

async function fetchStreamed(registry: Registry, pack: Digest, r: RangeWork, temps: TempNames, onObject: (e: PackIndexEntry) => void): Promise<void> {
  const f = r.frames[0]!;
  const x = new FrameExtractor(pack, f.frame, f.wanted, temps, onObject);
  const stream: Readable = await registry.openBlob(pack, { offset: r.offset, length: r.length });
  let got = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      got += chunk.length;
      // A backend sending more than asked must not make us decode foreign bytes as this frame.
      const usable = got > r.length ? chunk.subarray(0, chunk.length - (got - r.length)) : chunk;
      if (usable.length > 0) await x.push(usable);
      await temps.sink?.pump();
      if (got >= r.length) break;
    }
  } finally {
    stream.destroy();
  }
  await x.end();
}
