/**
 * Pulls the wanted objects out of one pack frame as its compressed bytes arrive: decodes with the
 * output bounded by the index's stated frame length, hashes each object while streaming, and
 * publishes it as `<destDir>/<hex>` by temp name + rename only when its digest matches.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { open, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { digestHex, sha256, type Digest } from '../cas/digest.js';
import { DigestMismatchError } from '../errors.js';
import { CorruptPackError } from './errors.js';
import type { PackIndexEntry } from './pack-index.js';
import type { DecodedFrame } from './decode-pool.js';
import { BoundedFrameDecoder } from './zstd-bounded.js';

/** Objects up to this size are collected in memory and written with one call. */
const SMALL_OBJECT_BYTES = 1 << 20;
/** Small-object writes in flight per frame: hides file-creation latency. */
const WRITES_IN_FLIGHT = 32;
/** Objects up to this size are written synchronously. */
const SYNC_WRITE_BYTES = 64 << 10;

export interface FrameRef {
  offset: number;
  length: number;
  rawLength: number;
}

interface Current {
  entry: PackIndexEntry;
  hash: Hash;
  got: number;
  pieces: Buffer[] | null;
  fh: FileHandle | null;
  /** Written through the sink (ObjectSink.append) rather than `fh`. */
  viaSink: boolean;
  tmp: string;
}

/**
 * Takes verified objects instead of this process writing them (see FetchOptions.sink): `write`
 * must copy `data` at once; `pump` is awaited after each frame, for backpressure.
 */
export interface ObjectSink {
  write(path: string, data: Uint8Array): void;
  pump(): Promise<void>;
  /**
   * With `rename`: large objects are written piece by piece through these too (to a temporary
   * name, renamed once verified), so this thread never waits for their writes.
   */
  append?(path: string, data: Uint8Array): void;
  rename?(path: string, dest: string): void;
  /**
   * Takes the verified object in memory instead (copying `data` at once); false: write it.
   * With `retain`, it may keep `data` itself: retain() keeps its memory valid until the
   * function it returns is called.
   */
  keep?(digest: Digest, data: Buffer, retain?: () => () => void): boolean;
}

/**
 * Unique temporary names in a destination directory: a random prefix per fetch and a counter,
 * so racing fetchers (in this or other processes) never share one, without a random draw per file.
 * A private destination (see FetchOptions.privateDest) skips them for verified buffers, and
 * spreads objects over 256 subdirectories (privateObjectPath).
 */
export class TempNames {
  private readonly prefix = `${process.pid}-${randomBytes(6).toString('hex')}`;
  private n = 0;

  constructor(
    readonly destDir: string,
    readonly privateDest = false,
    readonly sink?: ObjectSink,
  ) {}

  private readonly made = new Set<string>();

  next(digest: Digest): string {
    return join(this.destDir, `.tmp-${digestHex(digest).slice(0, 16)}-${this.prefix}-${this.n++}`);
  }

  /** Where a verified object ends up. */
  final(digest: Digest): string {
    if (!this.privateDest) return finalName(this.destDir, digest);
    const hex = digestHex(digest);
    const sub = hex.slice(0, 2);
    if (!this.made.has(sub)) {
      mkdirSync(join(this.destDir, sub), { recursive: true });
      this.made.add(sub);
    }
    return privateObjectPath(this.destDir, hex);
  }

  /** Writes verified bytes under the object's final name (synchronously: see SYNC_WRITE_BYTES). */
  publishSync(digest: Digest, data: Buffer, retain?: () => () => void): void {
    if (this.privateDest && this.sink?.keep?.(digest, data, retain) === true) return;
    const dest = this.final(digest);
    if (this.privateDest) {
      if (this.sink !== undefined) this.sink.write(dest, data);
      else writeFileSync(dest, data, { flag: 'wx' });
      return;
    }
    const tmp = this.next(digest);
    writeFileSync(tmp, data, { flag: 'wx' });
    renameSync(tmp, dest);
  }

  /** Writes verified bytes under the object's final name. */
  async publish(digest: Digest, data: Buffer): Promise<void> {
    if (this.privateDest && this.sink?.keep?.(digest, data) === true) return;
    const dest = this.final(digest);
    if (this.privateDest) {
      if (this.sink !== undefined) this.sink.write(dest, data);
      else await writeFile(dest, data, { flag: 'wx' });
      return;
    }
    const tmp = this.next(digest);
    await writeFile(tmp, data, { flag: 'wx' });
    await rename(tmp, dest);
  }
}

export function finalName(destDir: string, digest: Digest): string {
  return join(destDir, digestHex(digest));
}

/**
 * An object's name in a private destination: `<dir>/<first two hex digits>/<hex>`, so that a
 * consumer moving objects out of one subdirectory while the fetch creates them in another does
 * not serialize on one directory's lock (creating files in a directory another process renames
 * out of was several times slower, measured).
 */
export function privateObjectPath(destDir: string, hex: string): string {
  return join(destDir, hex.slice(0, 2), hex);
}

export class FrameExtractor {
  /** Made on first use: a frame decoded elsewhere needs none (each holds a 1 MiB buffer). */
  private streamDecoder: BoundedFrameDecoder | undefined;
  private pos = 0;
  private next = 0;
  private cur: Current | null = null;
  private readonly writes: Promise<void>[] = [];
  private decodedElsewhere = false;
  /** sha256 (hex) of each wanted object, in order, when the decoder computed them. */
  private digests: string[] | undefined;
  /** Keeps the decoded frame's memory valid for a consumer of views of it (see DecodedFrame). */
  private retain: (() => () => void) | undefined;

  /** `wanted` must be sorted by offset and lie inside the frame (validated by the caller). */
  constructor(
    private readonly pack: Digest,
    private readonly frame: FrameRef,
    private readonly wanted: PackIndexEntry[],
    private readonly temps: TempNames,
    private readonly onObject: (e: PackIndexEntry) => void,
  ) {}

  private get decoder(): BoundedFrameDecoder {
    this.streamDecoder ??= new BoundedFrameDecoder(this.frame.rawLength, () => `pack ${this.pack} frame at ${this.frame.offset}`);
    return this.streamDecoder;
  }

  /** Feeds compressed bytes of this frame, in order. */
  async push(input: Uint8Array): Promise<void> {
    try {
      for (const piece of this.decoder.decode(input)) await this.take(piece);
    } catch (e) {
      throw await this.failed(e);
    }
  }

  /**
   * Feeds the whole frame, already decoded elsewhere with the same bounds (DecodePool); a
   * rejection of that decoding is reported like one of this extractor's own.
   */
  async pushDecoded(decoded: Promise<DecodedFrame>): Promise<void> {
    this.decodedElsewhere = true;
    try {
      const { data: raw, digests, retain } = await decoded;
      this.retain = retain;
      if (raw.length !== this.frame.rawLength) throw new Error(`decodes to ${raw.length} bytes, stated ${this.frame.rawLength}`);
      if (digests.length === this.wanted.length) this.digests = digests;
      await this.take(raw);
    } catch (e) {
      throw await this.failed(e);
    }
  }

  /** Called after the last compressed byte: checks the frame was whole and every object came out. */
  async end(): Promise<void> {
    try {
      if (!this.decodedElsewhere) this.decoder.end();
      if (this.cur || this.next < this.wanted.length) throw new Error('frame ended before all its objects');
      await Promise.all(this.writes.splice(0));
    } catch (e) {
      throw await this.failed(e);
    }
  }

  /** Cleans up after an error and turns it into one that names the objects affected. */
  private async failed(e: unknown): Promise<unknown> {
    await Promise.allSettled(this.writes.splice(0));
    if (this.cur) {
      await this.cur.fh?.close().catch(() => undefined);
      await rm(this.cur.tmp, { force: true });
    }
    if (e instanceof DigestMismatchError || e instanceof CorruptPackError) return e;
    // A local I/O failure (ENOSPC, EACCES) says nothing about the pack: keep its own code.
    if (e instanceof Error && typeof (e as NodeJS.ErrnoException).syscall === 'string') return e;
    const affected = this.wanted.slice(this.cur ? this.next - 1 : this.next).map((w) => w.digest);
    // When every object already came out verified, the lie is in the frame's stated lengths: name its objects.
    const what = affected.length > 0 ? `objects not extracted: ${nameSome(affected)}` : `frame holds ${nameSome(this.wanted.map((w) => w.digest))}`;
    const msg = e instanceof Error ? e.message : String(e);
    return new CorruptPackError(`pack ${this.pack}, frame at ${this.frame.offset}: ${msg}; ${what}`, { cause: e });
  }

  /** Routes one decoded piece (valid only until the next await of the caller's loop). */
  private async take(piece: Buffer): Promise<void> {
    let p = piece;
    while (p.length > 0) {
      if (!this.cur) {
        const w = this.wanted[this.next];
        if (!w) {
          this.pos += p.length; // bytes after the last wanted object (other objects, end of archive)
          return;
        }
        if (this.pos < w.offset) {
          const skip = Math.min(p.length, w.offset - this.pos);
          this.pos += skip;
          p = p.subarray(skip);
          continue;
        }
        if (p.length >= w.size && (w.size <= SYNC_WRITE_BYTES || (this.digests !== undefined && this.temps.sink !== undefined))) {
          // Fast path: the whole object is in this piece; hash (unless done) and hand it over or
          // write it straight from the view.
          this.writeWhole(w, p.subarray(0, w.size));
          this.next++;
          this.pos += w.size;
          p = p.subarray(w.size);
          continue;
        }
        await this.begin(w);
        continue;
      }
      const c = this.cur;
      const n = Math.min(p.length, c.entry.size - c.got);
      const data = p.subarray(0, n);
      c.hash.update(data);
      if (c.pieces) c.pieces.push(Buffer.from(data));
      else if (c.viaSink) {
        this.temps.sink!.append!(c.tmp, data);
        await this.temps.sink!.pump();
      } else await writeAll(c.fh!, data);
      c.got += n;
      this.pos += n;
      p = p.subarray(n);
      if (c.got === c.entry.size) await this.complete();
    }
  }

  private writeWhole(w: PackIndexEntry, data: Buffer): void {
    const actual: Digest = this.digests !== undefined ? `sha256:${this.digests[this.next]!}` : sha256(data);
    if (actual !== w.digest) throw new DigestMismatchError(`object ${w.digest} in pack ${this.pack}`, w.digest, actual);
    this.temps.publishSync(w.digest, data, this.retain);
    this.onObject(w);
  }

  private async begin(w: PackIndexEntry): Promise<void> {
    this.next++;
    const small = w.size <= SMALL_OBJECT_BYTES;
    const tmp = this.temps.next(w.digest);
    const sink = this.temps.privateDest ? this.temps.sink : undefined;
    const viaSink = !small && sink?.append !== undefined && sink.rename !== undefined;
    this.cur = { entry: w, hash: createHash('sha256'), got: 0, pieces: small ? [] : null, fh: small || viaSink ? null : await open(tmp, 'wx'), viaSink, tmp };
    if (w.size === 0) await this.complete();
  }

  private async complete(): Promise<void> {
    const c = this.cur!;
    this.cur = null;
    const actual: Digest = `sha256:${c.hash.digest('hex')}`;
    if (c.fh) await c.fh.close();
    if (actual !== c.entry.digest) {
      await rm(c.tmp, { force: true });
      throw new DigestMismatchError(`object ${c.entry.digest} in pack ${this.pack}`, c.entry.digest, actual);
    }
    const dest = this.temps.final(c.entry.digest);
    if (c.pieces) {
      const data = c.pieces.length === 1 ? c.pieces[0]! : Buffer.concat(c.pieces);
      if (data.length <= SYNC_WRITE_BYTES) {
        // Synchronous for small files: the per-call cost of thread-pool round trips dominates (see writer.ts).
        this.temps.publishSync(c.entry.digest, data);
        this.onObject(c.entry);
        return;
      }
      const write = (async () => {
        await this.temps.publish(c.entry.digest, data);
        this.onObject(c.entry);
      })();
      write.catch(() => undefined); // awaited in end() or failed()
      this.writes.push(write);
      if (this.writes.length >= WRITES_IN_FLIGHT) await Promise.all(this.writes.splice(0));
    } else if (c.viaSink) {
      this.temps.sink!.rename!(c.tmp, dest);
      this.onObject(c.entry);
    } else {
      await rename(c.tmp, dest);
      this.onObject(c.entry);
    }
  }
}

/** One-shot hashing (Node >= 20.12) costs about half of a Hash object per small object. */
export function nameSome(digests: string[]): string {
  return digests.slice(0, 3).join(', ') + (digests.length > 3 ? ` and ${digests.length - 3} more` : '');
}

async function writeAll(fh: FileHandle, data: Uint8Array): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await fh.write(data, done, data.length - done);
    done += bytesWritten;
  }
}
