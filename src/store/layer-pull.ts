/**
 * Laying out one layer of an environment in the store: fetch the objects its manifest names that
 * the store lacks, verify every byte against its digest, write the read-only tree. Loaded by
 * pull.ts only when a layer is missing: on an environment already pulled (every `run` but the
 * first) none of this code is needed.
 */
import { randomBytes } from 'node:crypto';
import { ownedName } from '../util/owned-name.js';
import { lstatSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { type Digest, digestHex, verifyDigest } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { readManifest } from '../layer/manifest-read.js';
import type { LayerRef } from '../layer/env.js';
import type { FrameRef } from '../pack/frame-extract.js';
import { DecodePool, fetchObjects, framesOf, privateObjectPath, ReadBuffers, type FrameSink, type ObjectSink } from '../pack/reader.js';
import type { PackIndexEntry } from '../pack/pack-index.js';
import type { Registry } from '../registry/registry.js';
import { exists } from '../util/fs.js';
import { loadPackIndex } from './catalog.js';
import { withLock } from './lock.js';
import { Arrivals } from './arrivals.js';
import { type ManifestContents, scanFileDigests } from './manifest-scan.js';
import { FsmetaStream, MAX_HELPER_FRAME_BYTES, type SpooledFrame } from './fsmeta.js';
import { materialize } from './materialize.js';
import { type Owners, ownersFor, removeOwnedTree } from './owners.js';
import type { StorePaths } from './paths.js';
import type { LayerPulled, PullOptions } from './pull.js';
import { decompressVerified, MAX_MANIFEST_BYTES } from './zstdfile.js';

/**
 * Bytes of fetched objects that may wait in memory for the lay-out, which then writes each into
 * the tree in one go (in the helper's decoded frames, or held here when node decodes); the rest
 * wait on disk.
 */
const HELD_BYTES = 64 << 20;
/** Object bytes to fetch from which decoding runs in a worker thread (see pack/reader.ts). */
const POOL_MIN_BYTES = 8 << 20;
/** Deletions in laid-out layers: 0/0 character devices need privilege; xattr whiteouts do not (kernel >= 6.7). */
const WHITEOUTS = process.getuid?.() === 0 ? 'chardev' : 'xattr';

export async function ensureLayer(reg: Registry, store: StorePaths, layer: LayerRef, idShift: number, opts: PullOptions = {}): Promise<LayerPulled> {
  const dir = store.layer(layer.digest, idShift);
  let fetchedObjects = 0;
  let fetchedBytes = 0;
  let fetchedCompressedBytes = 0;
  await mkdir(store.layersDir, { recursive: true });
  const result = await withLock(
    `${dir}.lock`,
    () => exists(dir),
    async () => {
      const tmp = join(store.layersDir, ownedName('.tmp-', randomBytes(6).toString('hex')));
      await mkdir(tmp, { mode: 0o700 });
      // One helper process does the lay-out's file-system calls and writes the fetched objects. It
      // starts while the manifest is fetched and scanned: its start was a tenth of a small pull.
      let owners: Owners;
      let stream: FsmetaStream;
      let manifestPath: string;
      let contents: ManifestContents;
      let missing: Map<Digest, number>;
      const starting = ownersFor(idShift).then(async (o) => ({ owners: o, stream: await FsmetaStream.start(tmp, o) }));
      starting.catch(() => undefined); // a failed start is reported where it is awaited, not as unhandled meanwhile
      try {
        manifestPath = await ensureManifest(reg, store, layer, opts);
        contents = await scanFileDigests(manifestPath);
        missing = missingObjects(store, contents.unique);
        ({ owners, stream } = await starting);
      } catch (e) {
        await starting.then(
          ({ stream: s }) => s.abort(),
          () => undefined,
        );
        await rm(tmp, { recursive: true, force: true });
        throw e;
      }
      const { unique, repeated, plain } = contents;
      unique.clear();
      // Fetched objects wait in a directory of this pull's own until lay-out moves them into the pool.
      const staging = join(store.tmpDir, ownedName('stage-', randomBytes(6).toString('hex')));
      const expected = new Set<string>();
      for (const d of missing.keys()) expected.add(digestHex(d));
      let fetching: Promise<void> = Promise.resolve();
      try {
        const helperFrames = stream.decodesFrames && opts.decodeIn !== 'node';
        const helperLaysOut = helperFrames && opts.layOutIn !== 'node' && plain && owners.kind === 'direct';
        // The helper that lays out the manifest bounds the objects waiting for it itself (the
        // budget given by spillTo): node then need not count them, and never learns when each is placed.
        const arrivals = new Arrivals(helperLaysOut ? Infinity : (opts.heldBytes ?? HELD_BYTES));
        try {
          if (missing.size > 0) {
            opts.onProgress?.({ layer: layer.digest, phase: 'fetch', objects: missing.size });
            await mkdir(staging, { recursive: true });
          }
          opts.onProgress?.({ layer: layer.digest, phase: 'layout' });
          if (expected.size > 0 && helperFrames) stream.spillTo(staging, opts.heldBytes ?? HELD_BYTES);
          if (helperLaysOut) {
            await mkdir(store.linksDir, { recursive: true });
            await mkdir(store.tmpDir, { recursive: true });
            stream.layOutManifest({
              manifest: manifestPath,
              label: `layer ${layer.digest}`,
              idShift,
              whiteouts: WHITEOUTS,
              overlayXattrNs: 'user',
              linksDir: store.linksDir,
              tmpPrefix: join(store.tmpDir, `${ownedName('link-', randomBytes(6).toString('hex'))}-`),
              expected,
              repeated,
            });
            // it starts on the directories while the pack indexes load here
            stream.flush();
          }
          if (expected.size > 0) {
            // The lay-out starts at once (while the pack indexes load) and waits per object, so
            // fetching and laying out overlap.
            fetching = (async () => {
              const byPack = await packsInOrderOfUse(reg, store, layer, missing);
              const totals = fetchTotals(byPack);
              const objects = missing.size;
              opts.onProgress?.({ layer: layer.digest, phase: 'fetch', objects: totals.objects, ...totals.bytes });
              const done = { doneBytes: 0, compressedDoneBytes: 0 };
              await fetchForLayOut(
                reg,
                byPack,
                staging,
                stream,
                arrivals,
                helperFrames,
                opts.concurrency ?? 4,
                (n, bytes, compressed) => {
                  fetchedObjects += n;
                  fetchedBytes += bytes;
                  fetchedCompressedBytes += compressed;
                },
                (bytes, compressed) => {
                  done.doneBytes += bytes;
                  done.compressedDoneBytes += compressed;
                  opts.onProgress?.({ layer: layer.digest, phase: 'fetch', objects, ...totals.bytes, ...done });
                },
              );
            })();
            fetching.then(
              () => arrivals.fail(new Error(`layer ${layer.digest}: the fetch ended without an object the lay-out needs`)),
              (e: unknown) => arrivals.fail(e),
            );
          }
          // materialize links a hardlink only to a file it laid out itself: the reader need not check
          if (!helperLaysOut)
            await materialize(store, readManifest(manifestPath, `layer ${layer.digest}`, { parentsAndLinks: 'caller' }), tmp, {
              idShift,
              share: true,
              whiteouts: WHITEOUTS,
              overlayXattrNs: 'user',
              staging: {
                path: (hex) => privateObjectPath(staging, hex),
                hexes: expected,
                ready: (hex) => arrivals.wait(hex),
                take: (hex) => arrivals.take(hex),
                inHelper: (hex) => arrivals.placed(hex),
              },
              repeated,
              stream,
            });
          await fetching;
          await stream.close();
          await rename(tmp, dir);
          opts.onProgress?.({ layer: layer.digest, phase: 'done' });
        } catch (e) {
          // Stop the helper first: the fetch's next hand-off to it then fails fast instead of
          // downloading the rest of the packs for a lay-out that already failed.
          await stream.abort();
          arrivals.fail(e); // a fetch held back for room goes on, and fails at its next hand-off
          await fetching.catch(() => undefined);
          await removeOwnedTree(owners, tmp);
          throw e;
        }
        return dir;
      } finally {
        await fetching.catch(() => undefined);
        await rm(staging, { recursive: true, force: true });
      }
    },
  );
  if (result === null) opts.onProgress?.({ layer: layer.digest, phase: 'cached' });
  return { dir, fetchedObjects, fetchedBytes, fetchedCompressedBytes };
}

/** What a layer's fetch will bring: its objects, their uncompressed bytes and their frames' compressed bytes (each frame once). */
function fetchTotals(byPack: Map<Digest, PackIndexEntry[]>): { objects: number; bytes: { totalBytes: number; compressedTotalBytes: number } } {
  let objects = 0;
  let totalBytes = 0;
  let compressedTotalBytes = 0;
  for (const entries of byPack.values()) {
    const frames = new Set<number>();
    for (const e of entries) {
      objects++;
      totalBytes += e.size;
      if (e.size > 0 && !frames.has(e.frameOffset)) {
        frames.add(e.frameOffset);
        compressedTotalBytes += e.frameLength;
      }
    }
  }
  return { objects, bytes: { totalBytes, compressedTotalBytes } };
}

/**
 * The objects of `missing` each pack of the layer holds, packs in the order the lay-out first
 * needs them (a layer lists them by digest): it then trails the fetch instead of waiting for a
 * later pack while earlier ones pile up.
 */
async function packsInOrderOfUse(reg: Registry, store: StorePaths, layer: LayerRef, missing: Map<Digest, number>): Promise<Map<Digest, PackIndexEntry[]>> {
  const firstUse: Array<[Digest, PackIndexEntry[], number]> = [];
  for (const ref of layer.packs) {
    const index = await loadPackIndex(reg, store, ref);
    const wanted = index.entries.filter((e) => missing.has(e.digest));
    let first = Infinity;
    for (const e of wanted) {
      first = Math.min(first, missing.get(e.digest)!);
      missing.delete(e.digest);
    }
    if (wanted.length > 0) firstUse.push([ref.pack, wanted, first]);
  }
  if (missing.size > 0) {
    const first = missing.keys().next().value;
    throw new InvalidInputError(
      `layer ${layer.digest} references object ${first} that none of its packs holds (${missing.size} missing)`,
      'the environment was pushed incompletely or the registry lost packs; run `minisandbox verify`',
    );
  }
  return new Map(firstUse.sort((a, b) => a[2] - b[2]).map(([pack, wanted]) => [pack, wanted]));
}

/**
 * Fetches the objects a lay-out waits for, pack after pack in the order it needs them. With
 * `helperFrames`, frames go to the helper compressed (it decodes and verifies them on a thread of its
 * own, and places their objects), and nothing is decoded here. Otherwise
 * small objects are handed to the lay-out in memory (`arrivals`), the others written to
 * `staging` by the helper.
 */
async function fetchForLayOut(
  reg: Registry,
  byPack: Map<Digest, PackIndexEntry[]>,
  staging: string,
  stream: FsmetaStream,
  arrivals: Arrivals,
  helperFrames: boolean,
  concurrency: number,
  onPack: (objects: number, bytes: number, compressedBytes: number) => void,
  /** Bytes (uncompressed, compressed) of objects handed to the lay-out since the last call. */
  onBytes: (bytes: number, compressedBytes: number) => void,
): Promise<void> {
  // one decoding worker for every pack: starting one costs tens of ms (more under load)
  const total = [...byPack.values()].reduce((n, es) => es.reduce((m, e) => m + e.size, n), 0);
  const decodePool = total >= POOL_MIN_BYTES && !helperFrames ? new DecodePool() : undefined;
  /** Hands a frame to the helper; its objects count against the budget unless it streams them to disk. */
  const handOver = (pack: Digest, frame: FrameRef, wanted: PackIndexEntry[], compressed: Uint8Array | SpooledFrame): void => {
    stream.frame(pack, frame, wanted, compressed);
    for (const w of wanted) arrivals.sent(digestHex(w.digest), frame.rawLength <= MAX_HELPER_FRAME_BYTES ? w.size : 0);
  };
  // Where the registry's packs are local files, the helper reads its frames itself, and decodes
  // a large object's frame as a stream straight into a file; otherwise it gets frames small
  // enough to decode in memory in its records, and larger ones spooled to a file of the staging
  // directory, compressed (node decodes nothing).
  const files = new Map<Digest, string | undefined>();
  const fileOf = async (pack: Digest): Promise<string | undefined> => {
    if (!files.has(pack)) files.set(pack, await reg.localFile?.(pack));
    return files.get(pack);
  };
  const frameSink = (file: string | undefined): FrameSink => ({
    accepts: () => true,
    reads: file !== undefined,
    // too large for the helper to hold decoded: it streams them from a file
    spool: { dir: staging, needs: (f) => f.rawLength > MAX_HELPER_FRAME_BYTES },
    take: (pack, frame, wanted, compressed) => handOver(pack, frame, wanted, compressed ?? { file: file! }),
  });
  const sink: ObjectSink = {
    keep: (d, data, retain) => arrivals.hold(digestHex(d), data, retain),
    write: (path, data) => stream.write(path, data),
    append: (path, data) => stream.append(path, data),
    rename: (path, dest) => stream.rename(path, dest),
    pump: async () => {
      await stream.pump();
      await arrivals.room();
    },
  };
  if (helperFrames && reg.localFile !== undefined) {
    // Large objects' own frames go first: the helper streams them to disk on a thread of their
    // own while the rest arrives, instead of decoding them last while the lay-out waits (the
    // serial tail of a pull, measured). They take no memory there, so nothing bounds them here.
    for (const [pack, entries] of byPack) {
      const large = new Set(entries.filter((e) => e.size > 0 && e.frameRawLength > MAX_HELPER_FRAME_BYTES));
      if (large.size === 0) continue;
      const file = (await fileOf(pack))!;
      for (const { frame, wanted } of framesOf(pack, [...large])) {
        handOver(pack, frame, wanted, { file });
        for (const w of wanted) arrivals.arrive(digestHex(w.digest));
      }
      byPack.set(
        pack,
        entries.filter((e) => !large.has(e)),
      );
      const bytes = [...large].reduce((n, e) => n + e.size, 0);
      const compressed = fetchTotals(new Map([[pack, [...large]]])).bytes.compressedTotalBytes;
      onPack(large.size, bytes, compressed);
      onBytes(bytes, compressed);
    }
  }
  const readBuffers = new ReadBuffers(concurrency + 1);
  try {
    for (const [pack, entries] of byPack) {
      if (entries.length === 0) continue;
      const seen = { bytes: 0, compressedBytes: 0 };
      await fetchObjects(reg, pack, entries, staging, {
        concurrency,
        readBuffers,
        privateDest: true,
        sink,
        onObject: (d) => arrivals.arrive(digestHex(d)),
        onProgress: (p) => {
          onBytes(p.bytes - seen.bytes, p.compressedBytes - seen.compressedBytes);
          seen.bytes = p.bytes;
          seen.compressedBytes = p.compressedBytes;
        },
        ...(decodePool === undefined ? {} : { decodePool }),
        ...(helperFrames ? { frameSink: frameSink(await fileOf(pack)) } : {}),
      });
      onPack(
        entries.length,
        entries.reduce((n, e) => n + e.size, 0),
        seen.compressedBytes,
      );
    }
  } finally {
    await decodePool?.close();
  }
}

/** The verified, uncompressed manifest of a layer, fetched once per store. */
export async function ensureManifest(reg: Registry, store: StorePaths, layer: LayerRef, opts: PullOptions = {}): Promise<string> {
  const path = store.manifest(layer.digest);
  if (await exists(path)) return path;
  opts.onProgress?.({ layer: layer.digest, phase: 'manifest' });
  await mkdir(join(path, '..'), { recursive: true });
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}`;
  try {
    const blob = await reg.getBlob(layer.manifest);
    verifyDigest(`manifest blob of layer ${layer.digest}`, layer.manifest, blob);
    await decompressVerified(Readable.from([blob]), tmp, layer.digest, `manifest of layer ${layer.digest}`, MAX_MANIFEST_BYTES);
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  return path;
}

/**
 * Contents the store's pool lacks, each with its rank in the manifest's order of first use (sync:
 * one tiny call per content, where a thread-pool round trip each costs more than the call).
 */
function missingObjects(store: StorePaths, contents: Set<string>): Map<Digest, number> {
  const missing = new Map<Digest, number>();
  const empty = !lstatSync(store.linksDir, { throwIfNoEntry: false })?.isDirectory();
  let rank = 0;
  for (const hex of contents) {
    if (empty || !lstatSync(store.poolPrimary(hex), { throwIfNoEntry: false })?.isFile()) missing.set(`sha256:${hex}`, rank);
    rank++;
  }
  return missing;
}
