/**
 * The behaviour every Registry backend must share, as one vitest suite that takes a factory:
 * the S3 backend and the local directory backend both run it, so "same layout and semantics"
 * is checked, not promised.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Digest, sha256 } from '../../src/cas/digest.js';
import { InvalidInputError, NotFoundError } from '../../src/errors.js';
import type { Registry } from '../../src/registry/registry.js';

export interface RegistryUnderTest {
  registry: Registry;
  cleanup(): Promise<void>;
}

export interface ConformanceOptions {
  /** A fresh, empty registry per test. */
  fresh: () => Promise<RegistryUnderTest>;
  /** A blob this large must take the backend's large-blob path (S3: multipart). */
  largeBlobSize: number;
  /** Blobs to create in the listing test: more than one listing page of the backend. */
  listCount: number;
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(Buffer.isBuffer(c) ? c : Buffer.from(c));
  return Buffer.concat(chunks);
}

function blob(text: string): { digest: Digest; data: Buffer } {
  const data = Buffer.from(text);
  return { digest: sha256(data), data };
}

export function registryConformance(label: string, opts: ConformanceOptions): void {
  describe(`${label} registry conformance`, () => {
    let current: RegistryUnderTest | undefined;
    let scratch = '';
    const fresh = async (): Promise<Registry> => {
      current = await opts.fresh();
      return current.registry;
    };
    beforeAll(async () => {
      scratch = await mkdtemp(join(tmpdir(), 'conformance-'));
    });
    afterEach(async () => {
      await current?.cleanup();
      current = undefined;
    });
    afterAll(async () => {
      await rm(scratch, { recursive: true, force: true });
    });

    it("keeps gc's state document: none at first, then the last one written", async () => {
      const reg = await fresh();
      expect(await reg.getGcState()).toBeNull();
      await reg.putGcState(Buffer.from('{"a":1}'));
      await reg.putGcState(Buffer.from('{"a":2}'));
      expect((await reg.getGcState())?.toString()).toBe('{"a":2}');
      // not a blob, pack or ref: nothing else lists it
      expect(await collect(reg.listBlobs())).toEqual([]);
      expect(await collect(reg.listRefs())).toEqual([]);
    });

    it('stores a blob once and reads it whole, by range and as a stream', async () => {
      const reg = await fresh();
      const b = blob('0123456789abcdefghij');
      expect(await reg.statBlob(b.digest)).toBeNull();
      await reg.putBlob(b.digest, b.data);
      await reg.putBlob(b.digest, b.data); // idempotent
      const st = await reg.statBlob(b.digest);
      expect(st?.size).toBe(20);
      expect(st?.mtimeMs).toBeGreaterThan(Date.now() - 24 * 3600_000);
      expect((await reg.getBlob(b.digest)).toString()).toBe('0123456789abcdefghij');
      expect((await reg.getBlobRange(b.digest, 5, 7)).toString()).toBe('56789ab');
      // a buffer offered for the read: used by backends that say so, the bytes right either way
      const into = Buffer.alloc(64);
      const ranged = await reg.getBlobRange(b.digest, 2, 9, into);
      expect(ranged.toString()).toBe('23456789a');
      expect(ranged.buffer === into.buffer).toBe(reg.readsIntoBuffers === true);
      expect((await readAll(await reg.openBlob(b.digest))).toString()).toBe('0123456789abcdefghij');
      expect((await readAll(await reg.openBlob(b.digest, { offset: 10, length: 10 }))).toString()).toBe('abcdefghij');
      expect((await readAll(await reg.openBlob(b.digest, { offset: 3, length: 0 }))).length).toBe(0);
    });

    it('answers NotFoundError for a missing blob and null for its stat', async () => {
      const reg = await fresh();
      const missing = sha256('never stored');
      expect(await reg.statBlob(missing)).toBeNull();
      await expect(reg.getBlob(missing)).rejects.toBeInstanceOf(NotFoundError);
      await expect(reg.openBlob(missing)).rejects.toBeInstanceOf(NotFoundError);
      await expect(reg.getBlobRange(missing, 0, 1)).rejects.toBeInstanceOf(NotFoundError);
    });

    it('deletes a blob, and deleting a missing one is not an error', async () => {
      const reg = await fresh();
      const b = blob('to delete');
      await reg.putBlob(b.digest, b.data);
      await reg.deleteBlob(b.digest);
      expect(await reg.statBlob(b.digest)).toBeNull();
      await reg.deleteBlob(b.digest);
    });

    it('stores a large file blob intact and streams it back', async () => {
      const reg = await fresh();
      const data = randomBytes(opts.largeBlobSize);
      const digest = sha256(data);
      const path = join(scratch, `large-${randomBytes(4).toString('hex')}`);
      await writeFile(path, data);
      await reg.putBlobFile(digest, path);
      expect((await reg.statBlob(digest))?.size).toBe(data.length);
      const h = createHash('sha256');
      for await (const c of await reg.openBlob(digest)) h.update(c as Buffer);
      expect(`sha256:${h.digest('hex')}`).toBe(digest);
      const mid = Math.floor(data.length / 2);
      expect((await reg.getBlobRange(digest, mid, 4096)).equals(data.subarray(mid, mid + 4096))).toBe(true);
      const tail = await readAll(await reg.openBlob(digest, { offset: data.length - 1000, length: 1000 }));
      expect(tail.equals(data.subarray(data.length - 1000))).toBe(true);
    });

    it('lists every blob exactly once across listing pages', async () => {
      const reg = await fresh();
      const digests = new Set<Digest>();
      const all = Array.from({ length: opts.listCount }, (_, i) => blob(`blob number ${i}`));
      for (let i = 0; i < all.length; i += 8) {
        await Promise.all(all.slice(i, i + 8).map((b) => reg.putBlob(b.digest, b.data)));
      }
      for (const b of all) digests.add(b.digest);
      const listed = await collect(reg.listBlobs());
      expect(listed.length).toBe(opts.listCount);
      expect(new Set(listed.map((b) => b.digest))).toEqual(digests);
      for (const b of listed) expect(b.size).toBe(Buffer.byteLength(`blob number ${all.findIndex((x) => x.digest === b.digest)}`));
    });

    it('keeps refs as a mutable map of names, slashes included', async () => {
      const reg = await fresh();
      const a = sha256('a');
      const b = sha256('b');
      expect(await reg.getRef('ds/one')).toBeNull();
      await reg.putRef('ds/one', a);
      await reg.putRef('ds', b);
      await reg.putRef('ds/one/deeper', b);
      expect(await reg.getRef('ds/one')).toBe(a);
      await reg.putRef('ds/one', b);
      expect(await reg.getRef('ds/one')).toBe(b);
      expect(await reg.getRef('ds')).toBe(b);
      const refs = await collect(reg.listRefs());
      expect(refs.map((r) => r.name).sort()).toEqual(['ds', 'ds/one', 'ds/one/deeper']);
      await reg.deleteRef('ds/one');
      await reg.deleteRef('ds/one'); // idempotent
      expect(await reg.getRef('ds/one')).toBeNull();
      expect(await reg.getRef('ds/one/deeper')).toBe(b);
    });

    it('rejects ref names that could escape refs/', async () => {
      const reg = await fresh();
      for (const bad of ['../x', 'a/../../b', '/abs', '.hidden', 'a//b', '']) {
        await expect(reg.putRef(bad, sha256('x'))).rejects.toBeInstanceOf(InvalidInputError);
      }
    });

    it('keeps the pack catalog', async () => {
      const reg = await fresh();
      const packs = Array.from({ length: 3 }, (_, i) => ({ pack: sha256(`pack ${i}`), index: sha256(`index ${i}`) }));
      for (const p of packs) await reg.putPack(p.pack, p.index);
      await reg.putPack(packs[0]!.pack, packs[0]!.index);
      const listed = await collect(reg.listPacks());
      expect(listed.sort((x, y) => (x.pack < y.pack ? -1 : 1))).toEqual([...packs].sort((x, y) => (x.pack < y.pack ? -1 : 1)));
      await reg.deletePack(packs[1]!.pack);
      expect((await collect(reg.listPacks())).map((p) => p.pack).sort()).toEqual([packs[0]!.pack, packs[2]!.pack].sort());
    });

    it('survives concurrent writers of the same blobs and refs', async () => {
      const reg = await fresh();
      const shared = Array.from({ length: 6 }, (_, i) => blob(`shared ${i}`));
      const writers = Array.from({ length: 4 }, (_, w) =>
        (async () => {
          for (const b of shared) await reg.putBlob(b.digest, b.data);
          await reg.putRef('race/tag', shared[w]!.digest);
        })(),
      );
      await Promise.all(writers);
      for (const b of shared) expect((await reg.getBlob(b.digest)).equals(b.data)).toBe(true);
      const winner = await reg.getRef('race/tag');
      expect(shared.map((b) => b.digest)).toContain(winner);
      expect((await collect(reg.listBlobs())).length).toBe(shared.length);
    });
  });
}
