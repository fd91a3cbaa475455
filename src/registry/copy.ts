/**
 * Mirrors refs between any two registries (local or S3), copying only the blobs the target lacks.
 * Per ref, in the order that keeps the target consistent at every instant:
 *   1. blobs of the ref's closure (env config, layer manifests, packs, pack indexes), each
 *      verified against its digest while it streams through a temporary file;
 *   2. pack catalog entries for the closure's packs;
 *   3. the ref itself, last, so a ref in the target never points at missing blobs.
 * A crash anywhere leaves the target valid; a rerun skips what already arrived and finishes.
 */
import { createHash, randomBytes } from 'node:crypto';
import { ownedName } from '../util/owned-name.js';
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type Digest, verifyDigest } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, NotFoundError } from '../errors.js';
import { envClosure } from './closure.js';
import type { Registry } from './registry.js';
import { parseRefName } from '../cas/ref-name.js';
import { runPool } from '../util/pool.js';

export interface CopyProgress {
  phase: 'closure' | 'blob' | 'catalog' | 'ref';
  ref: string;
  /** Set for phase 'blob': the blob just copied or found present. */
  digest?: Digest;
  skipped?: boolean;
  refsDone: number;
  refsTotal: number;
  blobsCopied: number;
  blobsSkipped: number;
  bytesCopied: number;
}

export interface CopyOptions {
  /** Blobs copied at once. Default 4. */
  concurrency?: number;
  /** Where blobs wait while they are verified; default the OS temp dir. Same filesystem as a
   * local target makes its put a hardlink. */
  tmpDir?: string;
  /** Blobs up to this size are copied through memory instead of a temp file. Default 4 MiB. */
  inMemoryMax?: number;
  onProgress?: (p: CopyProgress) => void;
}

export interface CopySummary {
  refs: string[];
  blobsCopied: number;
  blobsSkipped: number;
  bytesCopied: number;
  catalogEntriesWritten: number;
  refsWritten: number;
}

/** Hashes what flows through and fails the pipeline if it does not match `digest` at the end. */
function verifying(digest: Digest, what: string): Transform {
  const h = createHash('sha256');
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      h.update(chunk);
      cb(null, chunk);
    },
    flush(cb) {
      const actual = `sha256:${h.digest('hex')}`;
      cb(actual === digest ? null : new DigestMismatchError(what, digest, actual));
    },
  });
}

async function copyBlob(
  from: Registry,
  to: Registry,
  digest: Digest,
  size: number,
  opts: Required<Pick<CopyOptions, 'tmpDir' | 'inMemoryMax'>>,
): Promise<void> {
  const what = `blob ${digest} from ${from.url}`;
  if (size <= opts.inMemoryMax) {
    const data = await from.getBlob(digest);
    verifyDigest(what, digest, data);
    await to.putBlob(digest, data);
    return;
  }
  await mkdir(opts.tmpDir, { recursive: true });
  const tmp = join(opts.tmpDir, ownedName('copy-', randomBytes(8).toString('hex')));
  try {
    await pipeline(await from.openBlob(digest), verifying(digest, what), createWriteStream(tmp, { mode: 0o600 }));
    await to.putBlobFile(digest, tmp);
  } finally {
    await rm(tmp, { force: true });
  }
}

export async function copyRefs(from: Registry, to: Registry, refs: string[] | 'all', opts: CopyOptions = {}): Promise<CopySummary> {
  const concurrency = Math.max(1, opts.concurrency ?? 4);
  const blobOpts = { tmpDir: opts.tmpDir ?? tmpdir(), inMemoryMax: opts.inMemoryMax ?? 4 * 1024 * 1024 };
  let names: string[];
  if (refs === 'all') {
    names = [];
    for await (const r of from.listRefs()) names.push(r.name);
    names.sort();
  } else {
    names = [...new Set(refs.map(parseRefName))];
  }
  const summary: CopySummary = { refs: names, blobsCopied: 0, blobsSkipped: 0, bytesCopied: 0, catalogEntriesWritten: 0, refsWritten: 0 };
  // Blobs and catalog entries handled earlier in this call: refs share most of their closure.
  const blobsDone = new Set<Digest>();
  const packsDone = new Set<Digest>();
  let targetCatalog: Map<Digest, Digest> | undefined;
  let refsDone = 0;
  const progress = (p: Omit<CopyProgress, 'refsDone' | 'refsTotal' | 'blobsCopied' | 'blobsSkipped' | 'bytesCopied'>): void => {
    opts.onProgress?.({
      ...p,
      refsDone,
      refsTotal: names.length,
      blobsCopied: summary.blobsCopied,
      blobsSkipped: summary.blobsSkipped,
      bytesCopied: summary.bytesCopied,
    });
  };

  for (const ref of names) {
    const env = await from.getRef(ref);
    if (env === null)
      throw new NotFoundError(`ref ${ref} in ${from.url}`, `list the source's refs with \`minisandbox --registry ${from.url} ls\`, or use --all`);
    progress({ phase: 'closure', ref });
    const closure = await envClosure(from, env);
    const todo = [...closure.blobs].filter((d) => !blobsDone.has(d));
    await runPool(todo, concurrency, async (digest) => {
      const have = await to.statBlob(digest);
      if (have !== null) {
        summary.blobsSkipped++;
      } else {
        const st = await from.statBlob(digest);
        if (st === null)
          throw new NotFoundError(`blob ${digest} (reached by ref ${ref}) in ${from.url}`, 'the source registry is incomplete; run `minisandbox verify` on it');
        await copyBlob(from, to, digest, st.size, blobOpts);
        summary.blobsCopied++;
        summary.bytesCopied += st.size;
      }
      blobsDone.add(digest);
      progress({ phase: 'blob', ref, digest, skipped: have !== null });
    });

    const packs = [...closure.packs].map(([pack, index]) => ({ pack, index })).filter((p) => !packsDone.has(p.pack));
    if (packs.length > 0) {
      if (targetCatalog === undefined) {
        targetCatalog = new Map();
        for await (const p of to.listPacks()) targetCatalog.set(p.pack, p.index);
      }
      for (const p of packs) {
        if (targetCatalog.get(p.pack) !== p.index) {
          await to.putPack(p.pack, p.index);
          targetCatalog.set(p.pack, p.index);
          summary.catalogEntriesWritten++;
        }
        packsDone.add(p.pack);
      }
      progress({ phase: 'catalog', ref });
    }

    if ((await to.getRef(ref)) !== env) {
      await to.putRef(ref, env);
      summary.refsWritten++;
    }
    refsDone++;
    progress({ phase: 'ref', ref });
  }
  return summary;
}

export function parseCopyRefs(refs: string[], all: boolean): string[] | 'all' {
  if (all && refs.length > 0) throw new InvalidInputError('give refs or --all, not both');
  if (!all && refs.length === 0) throw new InvalidInputError('no refs to copy', 'name refs to copy, or pass --all');
  return all ? 'all' : refs;
}
