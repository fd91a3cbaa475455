/**
 * Compression and framing settings, chosen by measurement (figures in src/pack/README.md).
 * Changing any of these changes pack bytes (and so pack digests) but never the readability of
 * existing packs: readers rely only on the index and on standard zstd frames.
 */

/** zstd level: level 3 is the knee (level 5 gains 5% size for half the speed). */
export const COMPRESSION_LEVEL = 3;

/**
 * Target uncompressed bytes of a frame of small objects. 4 MiB keeps 98.6% of the ratio of one
 * unbroken stream while a pull of one small object over-fetches about 1 MiB compressed.
 */
export const FRAME_TARGET_BYTES = 4 << 20;

/** Default compressed size at which a writer starts a new pack. */
export const PACK_TARGET_BYTES = 64 << 20;

/** Pieces in which large objects are read and fed to the compressor. */
export const STREAM_CHUNK_BYTES = 1 << 20;

/**
 * Workers compressing a large object's frame: zstd's own threads, so the main thread keeps
 * reading and hashing the file while they compress.
 */
export const LARGE_FRAME_WORKERS = 2;

/**
 * zstd's job size for those threads. Its default at level 3 is 8 MiB, and it keeps about eight
 * jobs' worth of input and output buffers: 57 MiB for one context, most of the peak memory of
 * an import's large files. 2 MiB jobs hold 17 MiB and cost 0.36% of compressed size on a tar of
 * /usr/lib (4 MiB: 32 MiB, 0.16%), at the same speed.
 */
export const LARGE_FRAME_JOB_BYTES = 2 << 20;

/** Reader: neighbouring frames closer than this are fetched in one range read. */
export const MERGE_GAP_BYTES = 256 << 10;

/** Reader: a coalesced range read is buffered whole; above this, frames are streamed. */
export const MAX_BUFFERED_RANGE_BYTES = 16 << 20;
