/**
 * `verify`: recompute every digest in a registry and a store, and check that every ref reaches
 * only blobs that exist. Reports problems instead of stopping at the first.
 */
import { createHash } from 'node:crypto';
import { lstat, mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { type Digest, DigestSchema, sha256File } from '../cas/digest.js';
import { errorMessage } from '../errors.js';
import { readManifest } from '../layer/manifest-read.js';
import { decodePath } from '../layer/path.js';
import { fetchObjects } from '../pack/reader.js';
import { parsePackIndex } from '../pack/pack-index.js';
import { envClosure } from '../registry/closure.js';
import type { Registry } from '../registry/registry.js';
import type { LayerRef } from '../layer/env.js';
import { decompressVerified, MAX_MANIFEST_BYTES } from './zstdfile.js';
import { asDiskError, diskErrno, namingDisk } from '../util/disk-error.js';
import { isErrno, readdirOrEmpty as list } from '../util/fs.js';
import { DIRECT_OWNERS, type Owners, inUserNamespace, sha256FilesAs } from './owners.js';
import type { StorePaths } from './paths.js';

export interface Problem {
  kind:
    | 'corrupt-blob'
    | 'missing-blob'
    | 'dangling-ref'
    | 'bad-ref'
    | 'bad-pack'
    | 'bad-catalog'
    | 'corrupt-store'
    | 'bad-layer'
    | 'bad-manifest'
    /** A ref a pull would refuse: a layer's manifest breaks the lay-out's rules. */
    | 'refused-ref'
    | 'missing-object'
    | 'bad-size';
  subject: string;
  detail: string;
}

export interface VerifyReport {
  blobs: number;
  packs: number;
  objects: number;
  refs: number;
  storeFiles: number;
  problems: Problem[];
}

async function hashStream(s: NodeJS.ReadableStream): Promise<Digest> {
  const h = createHash('sha256');
  for await (const c of s) h.update(c as Buffer);
  return `sha256:${h.digest('hex')}`;
}

/**
 * `onRefused`: told of each layer whose manifest a pull would refuse for what it holds (the CLI
 * records it in the store, where `ls` finds it).
 */
export async function verifyRegistry(
  reg: Registry,
  scratchDir: string,
  onProgress?: (what: string) => void,
  onRefused?: (layer: Digest, why: string) => Promise<void>,
): Promise<Omit<VerifyReport, 'storeFiles'>> {
  const problems: Problem[] = [];
  const present = new Set<Digest>();
  let blobs = 0;
  for await (const b of reg.listBlobs()) {
    blobs++;
    onProgress?.(`blob ${b.digest}`);
    try {
      const actual = await hashStream(await reg.openBlob(b.digest));
      if (actual === b.digest) present.add(b.digest);
      else problems.push({ kind: 'corrupt-blob', subject: b.digest, detail: `content hashes to ${actual}` });
    } catch (e) {
      problems.push({ kind: 'corrupt-blob', subject: b.digest, detail: errorMessage(e) });
    }
  }
  let packs = 0;
  let objects = 0;
  for await (const p of reg.listPacks()) {
    packs++;
    if (!present.has(p.pack) || !present.has(p.index)) {
      problems.push({ kind: 'bad-catalog', subject: p.pack, detail: `pack or its index ${p.index} is missing or corrupt` });
      continue;
    }
    onProgress?.(`pack ${p.pack}`);
    const dir = await namingDisk("the store's", scratchDir, () => mkdtemp(join(scratchDir, 'verify-')));
    try {
      const index = parsePackIndex(await reg.getBlob(p.index), p.index);
      // Decompressing every object and checking its digest is the only way to trust a pack.
      await fetchObjects(reg, p.pack, index.entries, dir, { concurrency: 2 });
      objects += index.entries.length;
    } catch (e) {
      const disk = scratchDiskFailure(e, dir);
      if (disk !== undefined) throw disk;
      problems.push({ kind: 'bad-pack', subject: p.pack, detail: errorMessage(e) });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  let refs = 0;
  // by the whole layer reference: two environments may give one manifest different packs or counts
  const layersChecked = new Set<string>();
  /** Layers whose manifest a pull refuses, with why: every ref reaching one is reported. */
  const refused = new Map<Digest, string>();
  const indexes = new Map<Digest, Map<Digest, number>>();
  for await (const r of reg.listRefEntries()) {
    refs++;
    if (r.digest === null) {
      problems.push({ kind: 'bad-ref', subject: r.name, detail: r.broken });
      continue;
    }
    try {
      const c = await envClosure(reg, r.digest);
      for (const b of c.blobs) {
        if (!present.has(b)) problems.push({ kind: 'dangling-ref', subject: r.name, detail: `reaches missing or corrupt blob ${b}` });
      }
      for (const layer of c.config.layers) {
        const key = JSON.stringify(layer);
        if (!layersChecked.has(key)) {
          layersChecked.add(key);
          onProgress?.(`layer ${layer.digest}`);
          const found = await checkLayer(reg, layer, present, scratchDir, indexes);
          problems.push(...found.problems);
          if (found.refused !== undefined) {
            refused.set(layer.digest, found.refused);
            await onRefused?.(layer.digest, found.refused);
          }
        }
        const why = refused.get(layer.digest);
        if (why !== undefined) problems.push({ kind: 'refused-ref', subject: r.name, detail: `a pull refuses its layer ${layer.digest}: ${why}` });
      }
    } catch (e) {
      problems.push({ kind: 'dangling-ref', subject: r.name, detail: errorMessage(e) });
    }
  }
  return { blobs, packs, objects, refs, problems };
}

/**
 * A failure of the store's disk while verify decoded into its scratch dir (under the store): no
 * fault of the registry's pack or manifest, and every later one would fail alike, so verify stops
 * and says so. ENOSPC and EDQUOT come only from writes, which go to the scratch dir; an EIO only
 * counts when node names a path there (one reading the registry is that pack's problem).
 */
function scratchDiskFailure(e: unknown, dir: string): unknown {
  const errno = diskErrno(e);
  if (errno === undefined) return undefined;
  const path = (e as { path?: unknown }).path;
  if (errno === 'EIO' && !(typeof path === 'string' && path.startsWith(dir))) return undefined;
  return asDiskError(e, "the store's", dir);
}

/**
 * What a pull of the layer would refuse or misreport, found without laying it out: a manifest
 * that does not decode to its digest or does not parse, objects that none of the layer's packs
 * holds, objects whose size differs from the manifest's, and counts in the environment config
 * (what `inspect` reports) that differ from the manifest's.
 */
async function checkLayer(
  reg: Registry,
  layer: LayerRef,
  present: Set<Digest>,
  scratchDir: string,
  indexes: Map<Digest, Map<Digest, number>>,
): Promise<{ problems: Problem[]; refused?: string }> {
  if (!present.has(layer.manifest)) return { problems: [] }; // reported as a dangling ref
  const problems: Problem[] = [];
  const subject = `layer ${layer.digest}`;
  const dir = await namingDisk("the store's", scratchDir, () => mkdtemp(join(scratchDir, 'verify-')));
  const sizes = new Map<Digest, number>();
  const counted = { entries: 0, size: 0 };
  let read = false;
  try {
    const path = join(dir, 'manifest');
    await decompressVerified(await reg.openBlob(layer.manifest), path, layer.digest, `manifest of ${subject}`, MAX_MANIFEST_BYTES);
    read = true;
    // the rules a pull's lay-out applies (the helper's are the same)
    for await (const e of readManifest(path, subject)) {
      counted.entries++;
      if (e.type !== 'file') continue;
      counted.size += e.size;
      const known = sizes.get(e.digest);
      if (known === undefined) sizes.set(e.digest, e.size);
      else if (known !== e.size)
        problems.push({
          kind: 'bad-size',
          subject: `${subject}/${e.path}`,
          detail: `object ${e.digest} is declared ${e.size} bytes here and ${known} bytes elsewhere in the manifest`,
        });
    }
  } catch (e) {
    const disk = scratchDiskFailure(e, dir);
    if (disk !== undefined) throw disk;
    problems.push({ kind: 'bad-manifest', subject, detail: errorMessage(e) });
    // the bytes are the layer's own (their digest checked): what they hold is refused for good
    return read ? { problems, refused: errorMessage(e) } : { problems };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const held = new Map<Digest, number>();
  for (const p of layer.packs) {
    if (!present.has(p.index)) continue; // reported as a dangling ref
    let index = indexes.get(p.index);
    if (index === undefined) {
      try {
        index = new Map(parsePackIndex(await reg.getBlob(p.index), p.index).entries.map((x) => [x.digest, x.size]));
      } catch {
        index = new Map(); // reported with its pack
      }
      indexes.set(p.index, index);
    }
    for (const [d, size] of index) if (sizes.has(d)) held.set(d, size);
  }
  let missing = 0;
  for (const [d, size] of sizes) {
    const got = held.get(d);
    if (got === undefined) {
      if (missing++ < MAX_PER_LAYER)
        problems.push({ kind: 'missing-object', subject, detail: `names object ${d}, which none of its ${layer.packs.length} pack(s) holds` });
    } else if (got !== size) {
      problems.push({ kind: 'bad-size', subject, detail: `declares object ${d} as ${size} bytes, its pack holds ${got}` });
    }
  }
  if (missing > MAX_PER_LAYER) problems.push({ kind: 'missing-object', subject, detail: `and ${missing - MAX_PER_LAYER} more objects no pack holds` });
  const declared = { entries: layer.entries, objects: layer.objects, size: layer.size };
  const actual = { entries: counted.entries, objects: sizes.size, size: counted.size };
  for (const k of ['entries', 'objects', 'size'] as const) {
    if (declared[k] !== actual[k])
      problems.push({ kind: 'bad-size', subject, detail: `the environment declares ${k} ${declared[k]}, the manifest has ${actual[k]}` });
  }
  return { problems };
}

/** Missing objects listed one by one per layer; the rest are counted. */
const MAX_PER_LAYER = 20;

/** Files hashed through the owners' helper at once, at most this many (memory per queued file). */
const DEFERRED_BATCH = 10_000;

/**
 * Every pooled inode and staged object against its name; every laid-out layer against its manifest.
 * `owners`: in a rootless store, files this process may not read are hashed with those rights.
 */
export async function verifyStore(
  store: StorePaths,
  onProgress?: (what: string) => void,
  owners: Owners = DIRECT_OWNERS,
): Promise<{ storeFiles: number; problems: Problem[] }> {
  const problems: Problem[] = [];
  let storeFiles = 0;
  let deferred: { path: Buffer; check: (digest: Digest | null) => void }[] = [];
  const flush = async (): Promise<void> => {
    const batch = deferred;
    deferred = [];
    const got = await sha256FilesAs(
      owners,
      batch.map((d) => d.path),
    );
    batch.forEach((d, i) => d.check(got[i] === null ? null : `sha256:${got[i]}`));
  };
  /** `check` gets the file's digest, or null when it cannot be read. */
  const hash = async (p: string | Buffer, check: (digest: Digest | null) => void): Promise<void> => {
    try {
      check((await sha256File(p)).digest);
    } catch (e) {
      if (!inUserNamespace(owners) || !(isErrno(e, 'EACCES') || isErrno(e, 'EPERM'))) return check(null);
      deferred.push({ path: Buffer.from(p), check });
      if (deferred.length >= DEFERRED_BATCH) await flush();
    }
  };
  const checkPooled = async (p: string, hex: string): Promise<void> => {
    storeFiles++;
    await hash(p, (digest) => {
      if (digest !== `sha256:${hex}`)
        problems.push({ kind: 'corrupt-store', subject: p, detail: digest === null ? 'unreadable' : `content hashes to ${digest}` });
    });
  };
  for (const name of await list(store.linksDir)) {
    const p = join(store.linksDir, name);
    // links/<hex> and links/<hex>.<key>; older stores: links/<hex>/<key>
    const hex = name.slice(0, 64);
    if ((await lstat(p).catch(() => null))?.isDirectory()) {
      for (const n of await list(p)) await checkPooled(join(p, n), hex);
    } else {
      await checkPooled(p, hex);
    }
  }
  for (const hex of await list(store.objectsDir)) await checkPooled(join(store.objectsDir, hex), hex);
  for (const name of await list(store.layersDir)) {
    if (name.startsWith('.') || name.endsWith('.lock')) continue;
    const d = DigestSchema.safeParse(`sha256:${name.split('+')[0]}`);
    if (!d.success) continue;
    onProgress?.(`layer ${name}`);
    const dir = join(store.layersDir, name);
    try {
      const manifestPath = store.manifest(d.data);
      const actual = (await sha256File(manifestPath)).digest;
      if (actual !== d.data) {
        problems.push({ kind: 'corrupt-store', subject: manifestPath, detail: `manifest hashes to ${actual}` });
        continue;
      }
      for await (const e of readManifest(manifestPath, `layer ${d.data}`)) {
        if (e.type !== 'file') continue;
        const p = Buffer.concat([Buffer.from(`${dir}/`), decodePath(e.path)]);
        await hash(p, (got) => {
          if (got !== e.digest)
            problems.push({ kind: 'bad-layer', subject: `${name}/${e.path}`, detail: got === null ? 'missing or unreadable' : `content hashes to ${got}` });
        });
      }
    } catch (e) {
      problems.push({ kind: 'bad-layer', subject: name, detail: errorMessage(e) });
    }
  }
  await flush();
  return { storeFiles, problems };
}
