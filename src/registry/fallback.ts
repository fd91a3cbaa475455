/**
 * One registry read through another: blobs come from `primary` when it has them, else from
 * `fallback`; refs, writes and listings are the primary's. A node's snapshots live in a small
 * registry of their own (in its store) holding only the snapshot layers, while the layers below
 * them stay in the node's configured registry: this view pulls a snapshot's whole environment.
 */
import type { Readable } from 'node:stream';
import type { Digest } from '../cas/digest.js';
import type { BlobStat, RefEntry, Registry } from './registry.js';

export class FallbackRegistry implements Registry {
  readonly url: string;

  constructor(
    readonly primary: Registry,
    readonly fallback: Registry,
  ) {
    this.url = `${primary.url} (then ${fallback.url})`;
    // only where both have local files: a reader that gets one expects every pack to have one
    if (primary.localFile !== undefined && fallback.localFile !== undefined) {
      this.localFile = async (digest: Digest): Promise<string> => {
        const r = await this.holder(digest);
        return r.localFile!(digest);
      };
    }
  }

  readonly localFile?: (digest: Digest) => Promise<string>;

  private async holder(digest: Digest): Promise<Registry> {
    return (await this.primary.statBlob(digest)) !== null ? this.primary : this.fallback;
  }

  async statBlob(digest: Digest): Promise<BlobStat | null> {
    return (await this.primary.statBlob(digest)) ?? this.fallback.statBlob(digest);
  }
  async getBlob(digest: Digest): Promise<Buffer> {
    return (await this.holder(digest)).getBlob(digest);
  }
  async getBlobRange(digest: Digest, offset: number, length: number): Promise<Buffer> {
    // no `into`: the two backends may differ in whether they read into buffers
    return (await this.holder(digest)).getBlobRange(digest, offset, length);
  }
  async openBlob(digest: Digest, range?: { offset: number; length: number }): Promise<Readable> {
    return (await this.holder(digest)).openBlob(digest, range);
  }
  putBlobFile(digest: Digest, path: string): Promise<void> {
    return this.primary.putBlobFile(digest, path);
  }
  putBlob(digest: Digest, data: Buffer): Promise<void> {
    return this.primary.putBlob(digest, data);
  }
  deleteBlob(digest: Digest): Promise<void> {
    return this.primary.deleteBlob(digest);
  }
  listBlobs(): AsyncIterable<{ digest: Digest } & BlobStat> {
    return this.primary.listBlobs();
  }
  putPack(pack: Digest, index: Digest): Promise<void> {
    return this.primary.putPack(pack, index);
  }
  listPacks(): AsyncIterable<{ pack: Digest; index: Digest }> {
    return this.primary.listPacks();
  }
  deletePack(pack: Digest): Promise<void> {
    return this.primary.deletePack(pack);
  }
  getRef(name: string): Promise<Digest | null> {
    return this.primary.getRef(name);
  }
  putRef(name: string, digest: Digest): Promise<void> {
    return this.primary.putRef(name, digest);
  }
  deleteRef(name: string): Promise<void> {
    return this.primary.deleteRef(name);
  }
  listRefs(): AsyncIterable<{ name: string; digest: Digest }> {
    return this.primary.listRefs();
  }
  listRefEntries(): AsyncIterable<RefEntry> {
    return this.primary.listRefEntries();
  }
  getGcState(): Promise<Buffer | null> {
    return this.primary.getGcState();
  }
  putGcState(data: Buffer): Promise<void> {
    return this.primary.putGcState(data);
  }
}
