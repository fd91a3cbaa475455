/**
 * One interface for every registry backend (a local directory, an S3 prefix). Backends move bytes;
 * they do not interpret them. Digest verification of whole blobs happens in registry/blobs.ts,
 * of objects inside packs in pack/, so every backend gets the same checks.
 *
 * Layout shared by all backends (keys relative to the root or prefix):
 *   blobs/sha256/<hex>       immutable content-addressed blobs (packs, indexes, manifests, env configs)
 *   packs/<pack hex>         the pack catalog: body is the digest of the pack's index blob
 *   refs/<name>              mutable tag -> digest (body: the digest and a newline)
 *   gc/state.json            gc's record of the blobs it condemned (registry/gc.ts)
 */
import type { Readable } from 'node:stream';
import type { Digest } from '../cas/digest.js';

/**
 * A put of a blob that already exists refreshes its mtime once it is older than this: that is how
 * a push tells a running gc that it uses the blob (see registry/gc.ts).
 */
export const BLOB_REFRESH_AFTER_MS = 60_000;

export interface BlobStat {
  size: number;
  /** Last modification, ms since the epoch (gc grace periods). */
  mtimeMs: number;
}

export interface Registry {
  /** Human-readable location, e.g. `/srv/registry` or `s3://bucket/prefix`. */
  readonly url: string;

  statBlob(digest: Digest): Promise<BlobStat | null>;
  /** Whole blob into memory: only for small blobs (manifests, indexes, configs). Not verified here. */
  getBlob(digest: Digest): Promise<Buffer>;
  /**
   * Bytes [offset, offset+length) of a blob; backends with range reads fetch only those. `into`
   * (at least `length` bytes) is memory the caller reuses across reads: a backend that reads
   * into a buffer returns a view of it, others ignore it.
   */
  getBlobRange(digest: Digest, offset: number, length: number, into?: Buffer): Promise<Buffer>;
  /** Whether getBlobRange reads into a given buffer (else callers need not offer one). */
  readonly readsIntoBuffers?: boolean;
  /**
   * The local file holding a blob (NotFoundError if there is none), for a reader that reads
   * ranges of it itself (the lay-out helper). Only backends whose blobs are local files have it.
   */
  localFile?(digest: Digest): Promise<string>;
  /** Streaming read of a whole blob, or of `length` bytes from `offset` (multi-GB pack frames). */
  openBlob(digest: Digest, range?: { offset: number; length: number }): Promise<Readable>;
  /**
   * Stores a local file as the blob `digest`. The caller has already hashed the file.
   * Idempotent; concurrent puts of the same digest are harmless; never visible half-written.
   * Putting a blob that exists refreshes its mtime when older than BLOB_REFRESH_AFTER_MS (S3: for
   * blobs up to one part, by writing it again).
   */
  putBlobFile(digest: Digest, path: string): Promise<void>;
  putBlob(digest: Digest, data: Buffer): Promise<void>;
  deleteBlob(digest: Digest): Promise<void>;
  listBlobs(): AsyncIterable<{ digest: Digest } & BlobStat>;

  /** Registers a pack in the catalog; call only after both blobs exist. */
  putPack(pack: Digest, index: Digest): Promise<void>;
  listPacks(): AsyncIterable<{ pack: Digest; index: Digest }>;
  deletePack(pack: Digest): Promise<void>;

  getRef(name: string): Promise<Digest | null>;
  /** Writes a ref; the caller guarantees every blob it reaches exists. */
  putRef(name: string, digest: Digest): Promise<void>;
  deleteRef(name: string): Promise<void>;
  listRefs(): AsyncIterable<{ name: string; digest: Digest }>;
  /**
   * Every ref entry, those that name no digest too (an empty or malformed body, a name no ref
   * may have): what `verify` and `ls` report, where listRefs skips them.
   */
  listRefEntries(): AsyncIterable<RefEntry>;
  /** gc's record of the blobs it condemned (`gc/state.json`); null when there is none. */
  getGcState(): Promise<Buffer | null>;
  putGcState(data: Buffer): Promise<void>;
}

/** A ref entry as stored: the digest it names, or why it names none. */
export type RefEntry = { name: string; digest: Digest; broken?: undefined } | { name: string; digest: null; broken: string };
