/**
 * Implicit parent directories. A layer tar may hold `work/task.txt` without `work/` (the OCI
 * layer format allows it). Extraction onto the layers below keeps the `work/` they have, or
 * makes one (0755 root:root, as umoci, containerd and podman do). Here each layer is laid out as
 * a tree of its own and stacked with overlayfs, which shows a directory's attributes (mode,
 * owner, mtime, xattrs) from the uppermost layer that has it: a `work/` given to the layer with a
 * runtime's attributes would override a `/tmp` of 1777 or a `/home/app` of 0700 owned by app.
 *
 * So the converter gives the layer the directories it implies with IMPLICIT_DIR's attributes
 * and lists them (layer-convert.ts); its conversion stays a function of the tar alone, cached by
 * diff id and shared by every image holding the layer. Once an import has every layer of its
 * image, each listed directory takes the attributes the same directory has in the merged view of
 * the layers below it in that image (the nearest layer that has it, unless a layer between
 * deletes it or replaces it by a non-directory), as umoci's extraction and containerd's apply
 * give them; where nothing below has it, IMPLICIT_DIR's stay. Where that changes anything, the
 * layer gets a variant manifest for this image: the same packs and objects, another manifest.
 *
 * Streaming: one pass over the layer's manifest and list, reading the manifests below forward
 * as the listed paths ask (each once, never past the last listed path), holding one entry and a
 * short chain of hiding ancestors per layer.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream';
import { finished } from 'node:stream/promises';
import { DecompressStream } from 'zstd-napi';
import type { Digest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError } from '../errors.js';
import { fastEntryLine } from '../layer/capture-line.js';
import type { LayerRef } from '../layer/env.js';
import { type DirEntry, type Entry, MANIFEST_HEADER } from '../layer/manifest.js';
import { ManifestChecker, readManifest } from '../layer/manifest-read.js';
import { OpenSubtrees } from '../layer/open-subtrees.js';
import { decodePath } from '../layer/path.js';
import { canonicalJson } from '../cas/canonical-json.js';
import type { Registry } from '../registry/registry.js';
import { compressFile, decompressVerified, HashTap, MAX_MANIFEST_BYTES } from '../store/zstdfile.js';

export interface StackedLayer {
  /** The layer as converted (or found converted before). */
  layer: LayerRef;
  /** Its list of implicit directories, if it has one (ConvertResult.implicitDirs). */
  implicitDirs?: Digest;
  /** What the layer is called in messages. */
  what: string;
}

/**
 * The layers of one image, lowest first, as this image stacks them: each layer with implicit
 * directories whose attributes below differ from IMPLICIT_DIR's is replaced by its variant
 * (its manifest published to `reg`; what a pull would refuse of it is refused here).
 */
export async function stackImplicitParents(reg: Registry, workDir: string, layers: readonly StackedLayer[]): Promise<LayerRef[]> {
  const out: LayerRef[] = [];
  // the final manifests of the layers below, uncompressed, fetched the first time one is needed
  const local: Array<string | undefined> = [];
  const manifestOf = async (i: number): Promise<string> => {
    const have = local[i];
    if (have !== undefined) return have;
    const path = join(workDir, `manifest-${i}-${randomBytes(4).toString('hex')}.jsonl`);
    const l = out[i] ?? layers[i]!.layer;
    await decompressVerified(await reg.openBlob(l.manifest), path, l.digest, `manifest of ${layers[i]!.what}`, MAX_MANIFEST_BYTES);
    local[i] = path;
    return path;
  };
  for (let i = 0; i < layers.length; i++) {
    const { layer, implicitDirs, what } = layers[i]!;
    if (implicitDirs === undefined || i === 0) {
      // nothing below the lowest layer: its implicit directories keep IMPLICIT_DIR's attributes
      out.push(layer);
      continue;
    }
    const below: string[] = [];
    for (let j = 0; j < i; j++) below.push(await manifestOf(j));
    const path = join(workDir, `variant-${i}-${randomBytes(4).toString('hex')}.jsonl`);
    const digest = await writeVariant(await manifestOf(i), implicitList(reg, implicitDirs, what), below, path, what);
    if (digest === layer.digest) {
      await rm(path, { force: true });
      out.push(layer);
      continue;
    }
    const compressed = `${path}.zst`;
    const m = await compressFile(path, compressed);
    await reg.putBlobFile(m.digest, compressed);
    await rm(compressed, { force: true });
    if (local[i] !== undefined) await rm(local[i]!, { force: true });
    local[i] = path;
    out.push({ ...layer, digest, manifest: m.digest });
  }
  return out;
}

/** The listed paths, decoded, strictly in manifest order; the blob checked against its digest once read whole. */
async function* implicitList(reg: Registry, digest: Digest, what: string): AsyncGenerator<Buffer> {
  const tap = new HashTap();
  const plain = pipeline(await reg.openBlob(digest), tap, new DecompressStream(), () => undefined);
  let rest = '';
  let prev: Buffer | undefined;
  const bad = (why: string): InvalidInputError =>
    new InvalidInputError(`the implicit directories of ${what} (${digest}): ${why}`, 'the registry content is corrupt or hostile; run `minisandbox verify`');
  for await (const chunk of plain) {
    const lines = (rest + (chunk as Buffer).toString('utf8')).split('\n');
    rest = lines.pop()!;
    for (const line of lines) {
      let p: unknown;
      try {
        p = JSON.parse(line);
      } catch {
        throw bad('a line is not JSON');
      }
      if (typeof p !== 'string') throw bad('a line is not a path');
      const raw = decodePath(p);
      if (prev !== undefined && Buffer.compare(prev, raw) >= 0) throw bad(`${JSON.stringify(p)} is out of order`);
      prev = raw;
      yield raw;
    }
  }
  if (rest !== '') throw bad('truncated');
  const actual = tap.digest();
  if (actual !== digest) throw new DigestMismatchError(`the implicit directories of ${what}`, digest, actual);
}

/** The attributes a directory takes from below: the nearest layer's, or none. */
type Attrs = Pick<DirEntry, 'mode' | 'uid' | 'gid' | 'mtime' | 'xattrs'>;

/**
 * Writes the layer's manifest with each listed directory's attributes as the layers below give
 * them; returns the digest of what it wrote.
 */
async function writeVariant(manifest: string, listed: AsyncIterable<Buffer>, below: string[], dest: string, what: string): Promise<Digest> {
  const lower = below.map((p, j) => new LayerBelow(p, `layer ${j + 1} below ${what}`));
  const list = listed[Symbol.asyncIterator]();
  let next = await list.next();
  // this layer's opaque directories: what is below them in the layers below is hidden
  const opaque = new OpenSubtrees<{ raw: Buffer }>();
  // the variant is the layer's manifest with other attributes: the checks it passed hold (hardlinks
  // unchanged), and the parents are checked again as the lay-out will
  const check = new ManifestChecker(`the manifest of ${what} in this image`, { parents: true, hardlinks: false });
  const out = createWriteStream(dest);
  const hash = createHash('sha256');
  const write = async (s: string): Promise<void> => {
    const b = Buffer.from(s, 'utf8');
    hash.update(b);
    if (!out.write(b)) await new Promise<void>((r) => out.once('drain', r));
  };
  try {
    await write(`${canonicalJson(MANIFEST_HEADER)}\n`);
    for await (const e of readManifest(manifest, `the manifest of ${what}`, { parentsAndLinks: 'caller' })) {
      const raw = decodePath(e.path);
      opaque.advance(raw);
      let entry: Entry = e;
      if (next.done !== true && next.value.equals(raw)) {
        if (e.type !== 'dir') throw new InvalidInputError(`${what}: implicit directory ${JSON.stringify(e.path)} is a ${e.type} in its manifest`);
        const from = opaque.ancestorOf(raw) === undefined ? await attrsBelow(lower, raw) : undefined;
        if (from !== undefined) {
          const { xattrs: _own, ...rest } = e;
          entry = { ...rest, mode: from.mode, uid: from.uid, gid: from.gid, mtime: from.mtime, ...(from.xattrs === undefined ? {} : { xattrs: from.xattrs }) };
        }
        next = await list.next();
      } else if (next.done !== true && Buffer.compare(next.value, raw) < 0) {
        throw new InvalidInputError(`${what}: implicit directory ${JSON.stringify(next.value.toString())} is not in its manifest`);
      }
      if (e.type === 'dir' && e.opaque === true) opaque.push({ raw });
      check.emitted(entry, raw);
      await write(fastEntryLine(entry));
    }
    if (next.done !== true) throw new InvalidInputError(`${what}: implicit directory ${JSON.stringify(next.value.toString())} is not in its manifest`);
    out.end();
    await finished(out);
  } catch (e) {
    out.destroy();
    throw e;
  } finally {
    await Promise.all(lower.map((l) => l.close()));
  }
  return `sha256:${hash.digest('hex')}`;
}

/** What the layers below show at `raw`, topmost first: a directory's attributes, or nothing. */
async function attrsBelow(lower: LayerBelow[], raw: Buffer): Promise<Attrs | undefined> {
  for (let j = lower.length - 1; j >= 0; j--) {
    const r = await lower[j]!.at(raw);
    if (r === undefined) continue;
    // deleted, hidden or replaced by a non-directory there: a new directory, as extraction makes
    if (r === 'hidden' || r.type !== 'dir') return undefined;
    return { mode: r.mode, uid: r.uid, gid: r.gid, mtime: r.mtime, ...(r.xattrs === undefined ? {} : { xattrs: r.xattrs }) };
  }
  return undefined;
}

/** One layer's manifest below, read forward as later and later paths are asked about. */
class LayerBelow {
  private readonly it: AsyncIterator<Entry>;
  private ahead: { e: Entry; raw: Buffer } | null | undefined;
  /** Whiteouts, non-directories and opaque directories: what hides the layers further below. */
  private readonly hiding = new OpenSubtrees<{ raw: Buffer }>();

  constructor(path: string, label: string) {
    this.it = readManifest(path, label, { parentsAndLinks: 'caller' })[Symbol.asyncIterator]();
  }

  /** This layer's entry at `raw`; `hidden` if an ancestor here hides the layers below; undefined if it has neither. */
  async at(raw: Buffer): Promise<Entry | 'hidden' | undefined> {
    for (;;) {
      if (this.ahead === undefined) {
        const r = await this.it.next();
        this.ahead = r.done === true ? null : { e: r.value, raw: decodePath(r.value.path) };
      }
      if (this.ahead === null || Buffer.compare(this.ahead.raw, raw) >= 0) break;
      const { e, raw: passed } = this.ahead;
      this.ahead = undefined;
      this.hiding.advance(passed);
      if (e.type !== 'dir' || e.opaque === true) this.hiding.push({ raw: passed });
    }
    if (this.ahead !== null && this.ahead.raw.equals(raw)) return this.ahead.e;
    this.hiding.advance(raw);
    return this.hiding.ancestorOf(raw) === undefined ? undefined : 'hidden';
  }

  async close(): Promise<void> {
    await this.it.return?.();
  }
}
