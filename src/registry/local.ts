/**
 * A registry in a local directory. Every write goes to `tmp/` first and is renamed into place,
 * so readers never see half a blob or ref and racing writers of the same content are harmless.
 * Ref names may contain `/`; on disk they are flattened (`/` -> `%`, which names cannot contain)
 * so that `a` and `a/b` can both exist.
 */
import { createReadStream, readFileSync } from 'node:fs';
import { copyFile, link, mkdir, open, readFile, rename, rm, stat, unlink, utimes, writeFile, chmod } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { type Digest, DigestSchema, digestHex, parseDigest } from '../cas/digest.js';
import { NotFoundError } from '../errors.js';
import { asDiskError, namingDisk } from '../util/disk-error.js';
import { isErrno, readdirOrEmpty } from '../util/fs.js';
import { randomHex } from '../util/lazy-crypto.js';
import { BLOB_REFRESH_AFTER_MS, type BlobStat, type RefEntry, type Registry } from './registry.js';
import { parseRefName, refBodyProblem, refNameProblem } from '../cas/ref-name.js';

export class LocalRegistry implements Registry {
  readonly root: string;
  readonly url: string;

  constructor(root: string) {
    this.root = resolve(root);
    this.url = this.root;
  }

  private blobPath(d: Digest): string {
    return join(this.root, 'blobs', 'sha256', digestHex(parseDigest(d)));
  }

  private refPath(name: string): string {
    return join(this.root, 'refs', parseRefName(name).replaceAll('/', '%'));
  }

  private async tmpPath(): Promise<string> {
    const dir = join(this.root, 'tmp');
    await mkdir(dir, { recursive: true });
    return join(dir, `${process.pid}-${randomHex(8)}`);
  }

  /** Writes via a temporary name and renames; the rename is the commit point. */
  private async writeAtomic(dest: string, data: Buffer | string, mode = 0o444): Promise<void> {
    const tmp = await namingDisk("the registry's", this.root, () => this.tmpPath());
    try {
      await writeFile(tmp, data, { mode });
      await mkdir(join(dest, '..'), { recursive: true });
      await rename(tmp, dest);
    } catch (e) {
      await rm(tmp, { force: true });
      throw asDiskError(e, "the registry's", tmp);
    }
  }

  async statBlob(digest: Digest): Promise<BlobStat | null> {
    try {
      const st = await stat(this.blobPath(digest));
      return { size: st.size, mtimeMs: st.mtimeMs };
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return null;
      throw e;
    }
  }

  async getBlob(digest: Digest): Promise<Buffer> {
    try {
      return await readFile(this.blobPath(digest));
    } catch (e) {
      if (isErrno(e, 'ENOENT'))
        throw new NotFoundError(`blob ${digest} in registry ${this.url}`, 'push the content again, or run `minisandbox verify` to list what is missing');
      throw e;
    }
  }

  readonly readsIntoBuffers = true;

  async localFile(digest: Digest): Promise<string> {
    if ((await this.statBlob(digest)) === null) throw new NotFoundError(`blob ${digest} in registry ${this.url}`);
    return this.blobPath(digest);
  }

  async getBlobRange(digest: Digest, offset: number, length: number, into?: Buffer): Promise<Buffer> {
    let fh;
    try {
      fh = await open(this.blobPath(digest), 'r');
    } catch (e) {
      if (isErrno(e, 'ENOENT')) throw new NotFoundError(`blob ${digest} in registry ${this.url}`);
      throw e;
    }
    try {
      const buf = into !== undefined && into.length >= length ? into.subarray(0, length) : Buffer.allocUnsafe(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await fh.read(buf, got, length - got, offset + got);
        if (bytesRead === 0) break;
        got += bytesRead;
      }
      return got === length ? buf : buf.subarray(0, got);
    } finally {
      await fh.close();
    }
  }

  async openBlob(digest: Digest, range?: { offset: number; length: number }): Promise<Readable> {
    const path = this.blobPath(digest);
    // Open eagerly so a missing blob is an error here, not an 'error' event later.
    const fh = await open(path, 'r').catch((e: unknown) => {
      if (isErrno(e, 'ENOENT')) throw new NotFoundError(`blob ${digest} in registry ${this.url}`);
      throw e;
    });
    if (range === undefined) return createReadStream('', { fd: fh, highWaterMark: 1 << 20 });
    if (range.length === 0) {
      await fh.close();
      const { Readable: R } = await import('node:stream');
      return R.from([]);
    }
    return createReadStream('', { fd: fh, start: range.offset, end: range.offset + range.length - 1, highWaterMark: 1 << 20 });
  }

  /** True when the blob exists (its mtime refreshed if stale): nothing to write. */
  private async present(digest: Digest): Promise<boolean> {
    const st = await this.statBlob(digest);
    if (st === null) return false;
    if (Date.now() - st.mtimeMs > BLOB_REFRESH_AFTER_MS) {
      const now = new Date();
      // best effort: another user's blob in a shared directory may refuse it
      await utimes(this.blobPath(digest), now, now).catch(() => undefined);
    }
    return true;
  }

  async putBlobFile(digest: Digest, path: string): Promise<void> {
    // a full disk here is the registry's, named as such (a caller's own writes are the store's)
    return namingDisk("the registry's", this.root, () => this.placeBlobFile(digest, path));
  }

  private async placeBlobFile(digest: Digest, path: string): Promise<void> {
    const dest = this.blobPath(digest);
    if (await this.present(digest)) return;
    await mkdir(join(dest, '..'), { recursive: true });
    // A hardlink is free when the file is on the same filesystem; EEXIST means a racing writer won.
    try {
      const tmp = await this.tmpPath();
      await link(path, tmp);
      await chmod(tmp, 0o444);
      await rename(tmp, dest);
      return;
    } catch (e) {
      if (!isErrno(e, 'EXDEV') && !isErrno(e, 'EPERM')) throw e;
    }
    const tmp = await this.tmpPath();
    try {
      await copyFile(path, tmp);
      await chmod(tmp, 0o444);
      await rename(tmp, dest);
    } catch (e) {
      await rm(tmp, { force: true });
      throw asDiskError(e, "the registry's", tmp);
    }
  }

  async putBlob(digest: Digest, data: Buffer): Promise<void> {
    if (await this.present(digest)) return;
    await this.writeAtomic(this.blobPath(digest), data);
  }

  async deleteBlob(digest: Digest): Promise<void> {
    await rm(this.blobPath(digest), { force: true });
  }

  async *listBlobs(): AsyncIterable<{ digest: Digest } & BlobStat> {
    const dir = join(this.root, 'blobs', 'sha256');
    for (const name of await readdirOrEmpty(dir)) {
      const d = DigestSchema.safeParse(`sha256:${name}`);
      if (!d.success) continue;
      try {
        const st = await stat(join(dir, name));
        yield { digest: d.data, size: st.size, mtimeMs: st.mtimeMs };
      } catch (e) {
        if (!isErrno(e, 'ENOENT')) throw e;
      }
    }
  }

  async putPack(pack: Digest, index: Digest): Promise<void> {
    await this.writeAtomic(join(this.root, 'packs', digestHex(parseDigest(pack))), `${parseDigest(index)}\n`);
  }

  async *listPacks(): AsyncIterable<{ pack: Digest; index: Digest }> {
    const dir = join(this.root, 'packs');
    for (const name of await readdirOrEmpty(dir)) {
      const pack = DigestSchema.safeParse(`sha256:${name}`);
      if (!pack.success) continue;
      const body = await readFile(join(dir, name), 'utf8').catch(() => '');
      const index = DigestSchema.safeParse(body.trim());
      if (index.success) yield { pack: pack.data, index: index.data };
    }
  }

  async deletePack(pack: Digest): Promise<void> {
    await rm(join(this.root, 'packs', digestHex(parseDigest(pack))), { force: true });
  }

  async getRef(name: string): Promise<Digest | null> {
    try {
      // synchronous: a ref is a line, read on every open of an environment
      return parseDigest(readFileSync(this.refPath(name), 'utf8').trim());
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return null;
      throw e;
    }
  }

  async putRef(name: string, digest: Digest): Promise<void> {
    await this.writeAtomic(this.refPath(name), `${parseDigest(digest)}\n`, 0o644);
  }

  async deleteRef(name: string): Promise<void> {
    await unlink(this.refPath(name)).catch((e: unknown) => {
      if (!isErrno(e, 'ENOENT')) throw e;
    });
  }

  async *listRefs(): AsyncIterable<{ name: string; digest: Digest }> {
    const dir = join(this.root, 'refs');
    for (const file of (await readdirOrEmpty(dir)).sort()) {
      const name = file.replaceAll('%', '/');
      const digest = await this.getRef(name).catch(() => null);
      if (digest !== null) yield { name, digest };
    }
  }

  async *listRefEntries(): AsyncIterable<RefEntry> {
    const dir = join(this.root, 'refs');
    for (const file of (await readdirOrEmpty(dir)).sort()) {
      const name = file.replaceAll('%', '/');
      const badName = refNameProblem(name);
      if (badName !== null) {
        yield { name, digest: null, broken: badName };
        continue;
      }
      let body: string;
      try {
        body = await readFile(join(dir, file), 'utf8');
      } catch (e) {
        if (isErrno(e, 'ENOENT')) continue; // deleted since the listing
        yield { name, digest: null, broken: `unreadable: ${String(e)}` };
        continue;
      }
      const problem = refBodyProblem(body);
      if (problem === null) yield { name, digest: parseDigest(body.trim()) };
      else yield { name, digest: null, broken: problem };
    }
  }

  async getGcState(): Promise<Buffer | null> {
    return readFile(join(this.root, 'gc', 'state.json')).catch((e: unknown) => {
      if (isErrno(e, 'ENOENT')) return null;
      throw e;
    });
  }

  async putGcState(data: Buffer): Promise<void> {
    await this.writeAtomic(join(this.root, 'gc', 'state.json'), data, 0o644);
  }

  /** Temporary files older than `olderThanMs` are leftovers of crashed writers. */
  async cleanTmp(olderThanMs: number): Promise<number> {
    const dir = join(this.root, 'tmp');
    let n = 0;
    for (const name of await readdirOrEmpty(dir)) {
      const p = join(dir, name);
      const st = await stat(p).catch(() => null);
      if (st !== null && Date.now() - st.mtimeMs >= olderThanMs) {
        await rm(p, { force: true, recursive: true });
        n++;
      }
    }
    return n;
  }
}
