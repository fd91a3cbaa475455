/**
 * The registry on S3 (or any S3-compatible server): same key layout and semantics as the local
 * directory registry (see registry.ts), through @aws-sdk/client-s3.
 *
 * Ref update rule (concurrent builders on different machines):
 *  - Blobs are immutable and content-addressed, and every writer stores all blobs a ref reaches
 *    before it writes the ref. Whatever order ref writes land in, the ref therefore names a
 *    complete closure: a ref can never point at missing blobs.
 *  - Where the server honours conditional writes (AWS S3 since 2024, MinIO, ...), a ref is created
 *    with `If-None-Match: *` and replaced with `If-Match: <etag it was read at>`
 *    (`compareAndSwapRef`): a writer that lost a race learns it and can decide. `putRef` is a
 *    "set": on losing it re-reads and writes again, i.e. the last writer wins.
 *  - Servers that ignore the conditions (s3rver, some gateways) give plain last-writer-wins by
 *    server arrival order, which by the first point is still always a consistent state.
 *  - gc must not delete a blob younger than its grace period, so a blob pushed for a ref that is
 *    about to be written is never collected from under it.
 */
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Readable } from 'node:stream';
import { rootCertificates } from 'node:tls';
import type * as S3Sdk from '@aws-sdk/client-s3';
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { type Digest, DigestSchema, digestHex, parseDigest } from '../cas/digest.js';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { BLOB_REFRESH_AFTER_MS, type BlobStat, type RefEntry, type Registry } from './registry.js';
import { parseRefName, refBodyProblem, refNameProblem } from '../cas/ref-name.js';
import { deferredExtraCa } from '../util/extra-ca.js';
import {
  DEFAULT_RETRY_POLICY,
  RemoteStoreError,
  type RetryHooks,
  type RetryPolicy,
  TruncatedBodyError,
  backoffDelayMs,
  httpStatusOf,
  isRetryable,
  withRetry,
} from './retry.js';
import { type S3Location, formatS3Url, hostNeedsPathStyle, parseS3Url } from './s3-config.js';
import { InFlightBudget, type InFlightLimits } from './s3-inflight.js';
import { runPool } from '../util/pool.js';

/** The AWS SDK, loaded on first use: it is a quarter of every CLI start, and most commands never touch S3. */
let sdkModule: typeof S3Sdk | undefined;
function sdk(): typeof S3Sdk {
  return (sdkModule ??= createRequire(import.meta.url)('@aws-sdk/client-s3') as typeof S3Sdk);
}

const MiB = 1024 * 1024;

export interface S3RegistryOptions {
  /** Overrides what the URL and environment say (tests, programmatic use). */
  endpoint?: string;
  region?: string;
  forcePathStyle?: boolean;
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /** Blobs larger than this go up in parts of this size (S3 needs parts >= 5 MiB). Default 16 MiB. */
  partSize?: number;
  /** Parts of one blob uploaded at once. Default 4. */
  partConcurrency?: number;
  /** Shared bound on requests and bytes in flight for this registry. Default 16 requests, 256 MiB. */
  inFlight?: Partial<InFlightLimits>;
  retry?: Partial<RetryPolicy>;
  /** Milliseconds to connect, and of socket silence before a request is abandoned and retried. */
  connectTimeoutMs?: number;
  idleTimeoutMs?: number;
  /** ListObjectsV2 MaxKeys (tests use small pages to exercise pagination). Default 1000. */
  listPageSize?: number;
  hooks?: RetryHooks;
}

/** Body parsing of small text objects (refs, pack catalog entries). */
function parseDigestBody(what: string, body: Buffer): Digest {
  const r = DigestSchema.safeParse(body.toString('utf8').trim());
  if (!r.success) throw new InvalidInputError(`${what} does not hold a digest`, 'the registry entry is corrupt; rewrite it (push or copy again) or delete it');
  return r.data;
}

function isNotFound(e: unknown): boolean {
  const name = typeof e === 'object' && e !== null ? (e as { name?: unknown }).name : undefined;
  return httpStatusOf(e) === 404 || name === 'NoSuchKey' || name === 'NotFound';
}

function isPreconditionFailed(e: unknown): boolean {
  const name = typeof e === 'object' && e !== null ? (e as { name?: unknown }).name : undefined;
  return httpStatusOf(e) === 412 || name === 'PreconditionFailed';
}

function sha256Base64(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('base64');
}

function asReadable(body: unknown): Readable {
  if (body instanceof Readable) return body;
  throw new MinisandboxError('REMOTE_STORE', 'S3 response has no readable body', {
    hint: 'the S3 client returned an unexpected body type; run on Node with the Node HTTP handler',
  });
}

interface OpenedBody {
  body: Readable;
  contentLength: number;
  etag: string | undefined;
}

export class S3Registry implements Registry {
  readonly url: string;
  readonly location: S3Location;
  readonly client: S3Client;
  readonly budget: InFlightBudget;
  private readonly partSize: number;
  private readonly partConcurrency: number;
  private readonly retry: RetryPolicy;
  private readonly listPageSize: number;
  private readonly hooks: RetryHooks;

  constructor(url: string, opts: S3RegistryOptions = {}) {
    const parsed = parseS3Url(url);
    this.location = {
      ...parsed,
      ...(opts.endpoint !== undefined ? { endpoint: opts.endpoint } : {}),
      ...(opts.region !== undefined ? { region: opts.region } : {}),
      forcePathStyle: opts.forcePathStyle ?? (parsed.forcePathStyle || hostNeedsPathStyle(opts.endpoint)),
    };
    this.url = formatS3Url(this.location);
    this.partSize = opts.partSize ?? 16 * MiB;
    if (this.partSize < 1) throw new RangeError('partSize must be positive');
    this.partConcurrency = Math.max(1, opts.partConcurrency ?? 4);
    this.retry = { ...DEFAULT_RETRY_POLICY, ...opts.retry };
    this.listPageSize = opts.listPageSize ?? 1000;
    this.hooks = opts.hooks ?? {};
    const limits: InFlightLimits = { maxRequests: 16, maxBytes: 256 * MiB, ...opts.inFlight };
    this.budget = new InFlightBudget(limits);
    const agentOpts = { keepAlive: true, maxSockets: limits.maxRequests + 4 };
    // the CA file bin/minisandbox kept from node's start-up (util/extra-ca.ts); read only for TLS
    const extraCa = this.location.endpoint?.startsWith('http:') === true ? undefined : deferredExtraCa();
    const config: S3ClientConfig = {
      forcePathStyle: this.location.forcePathStyle,
      // One retry policy for everything (withRetry): the SDK's would multiply attempts.
      maxAttempts: 1,
      // The SDK warns on every failed streaming upload that it cannot retry it; withRetry does, with a fresh stream.
      logger: {
        debug: () => undefined,
        info: () => undefined,
        trace: () => undefined,
        warn: (...args: unknown[]) => {
          if (!String(args[0]).includes('non-retryable streaming request')) console.warn(...args);
        },
        // Every failed command (a 404 HEAD included) is logged here; the caller gets a typed error instead.
        error: () => undefined,
      },
      // The SDK's default CRC32 trailers use aws-chunked bodies that S3-compatible servers often
      // reject; we send the sha256 we already know instead (ChecksumSHA256) and verify reads ourselves.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: {
        connectionTimeout: opts.connectTimeoutMs ?? 10_000,
        // Idle socket time, not total request time: a multi-GB pack may take minutes, a stalled
        // socket is abandoned (and the request retried or the stream resumed). 20 s: S3 answers
        // in well under a second; three silent attempts in a row end the request (retry.ts).
        socketTimeout: opts.idleTimeoutMs ?? 20_000,
        httpAgent: new HttpAgent(agentOpts),
        httpsAgent: new HttpsAgent(extraCa === undefined ? agentOpts : { ...agentOpts, ca: [...rootCertificates, extraCa] }),
      },
    };
    if (this.location.endpoint !== undefined) config.endpoint = this.location.endpoint;
    if (this.location.region !== undefined) config.region = this.location.region;
    // S3-compatible servers mostly ignore the region but the signer needs one; AWS itself gets
    // the SDK's chain (profile) when nothing was said.
    else if (this.location.endpoint !== undefined) config.region = 'us-east-1';
    if (opts.credentials !== undefined) config.credentials = opts.credentials;
    this.client = new (sdk().S3Client)(config);
  }

  /** Closes idle sockets; the registry must not be used afterwards. */
  close(): void {
    this.client.destroy();
  }

  private key(rel: string): string {
    return this.location.prefix === '' ? rel : `${this.location.prefix}/${rel}`;
  }

  private blobKey(d: Digest): string {
    return this.key(`blobs/sha256/${digestHex(parseDigest(d))}`);
  }

  private refKey(name: string): string {
    return this.key(`refs/${parseRefName(name)}`);
  }

  private packKey(pack: Digest): string {
    return this.key(`packs/${digestHex(parseDigest(pack))}`);
  }

  private get bucket(): string {
    return this.location.bucket;
  }

  private async retried<T>(what: string, op: (attempt: number) => Promise<T>): Promise<T> {
    try {
      return await withRetry(what, this.retry, op, this.hooks);
    } catch (e) {
      // the SDK's words for a client that AWS's endpoint cannot be addressed from: the user's to fix
      if (e instanceof RemoteStoreError && /Region is missing/.test(e.message))
        throw new InvalidInputError(
          `S3 registry ${this.url}: no region given, and none is set for AWS`,
          'set AWS_REGION (or AWS_DEFAULT_REGION, or a region in the AWS profile), or add ?region=R to the registry URL',
        );
      throw e;
    }
  }

  // ---- low-level object operations -------------------------------------------------------

  private async headObject(key: string): Promise<{ size: number; mtimeMs: number; etag: string | undefined } | null> {
    return this.retried(`HEAD ${key}`, () =>
      this.budget.run(0, async () => {
        try {
          const r = await this.client.send(new (sdk().HeadObjectCommand)({ Bucket: this.bucket, Key: key }));
          return { size: r.ContentLength ?? 0, mtimeMs: r.LastModified?.getTime() ?? 0, etag: r.ETag };
        } catch (e) {
          if (isNotFound(e)) return null;
          throw e;
        }
      }),
    );
  }

  /** One GET, not retried: returns once headers arrived. `end` is exclusive. */
  private async openBody(key: string, start: number, end: number | undefined): Promise<OpenedBody> {
    const ranged = start > 0 || end !== undefined;
    return this.budget.run(0, async () => {
      const r = await this.client.send(
        new (sdk().GetObjectCommand)({ Bucket: this.bucket, Key: key, ...(ranged ? { Range: `bytes=${start}-${end === undefined ? '' : end - 1}` } : {}) }),
      );
      const body = asReadable(r.Body);
      if (r.ContentLength === undefined) {
        body.destroy();
        throw new MinisandboxError('REMOTE_STORE', `GET ${key}: response has no Content-Length`, {
          hint: 'the S3 server or a proxy strips Content-Length; truncation could not be detected, so the response was refused',
        });
      }
      return { body, contentLength: r.ContentLength, etag: r.ETag };
    });
  }

  /**
   * Whole object, or [start, end), into memory, retried as a unit; a body shorter than its
   * Content-Length is a TruncatedBodyError (retried), never returned.
   */
  private async getBytes(key: string, what: string, start = 0, end?: number): Promise<Buffer> {
    const estimate = end === undefined ? MiB : end - start;
    return this.retried(`GET ${key}`, () =>
      this.budget.run(estimate, async () => {
        let opened: OpenedBody;
        try {
          opened = await this.client
            .send(
              new (sdk().GetObjectCommand)({
                Bucket: this.bucket,
                Key: key,
                ...(start > 0 || end !== undefined ? { Range: `bytes=${start}-${end === undefined ? '' : end - 1}` } : {}),
              }),
            )
            .then((r) => ({ body: asReadable(r.Body), contentLength: r.ContentLength ?? -1, etag: r.ETag }));
        } catch (e) {
          if (isNotFound(e)) throw new NotFoundError(`${what} in ${this.url}`);
          throw e;
        }
        const chunks: Buffer[] = [];
        let received = 0;
        for await (const chunk of opened.body) {
          const b = chunk as Buffer;
          chunks.push(b);
          received += b.length;
        }
        if (opened.contentLength < 0)
          throw new MinisandboxError('REMOTE_STORE', `GET ${key}: response has no Content-Length`, {
            hint: 'the S3 server or a proxy strips Content-Length; truncation could not be detected',
          });
        if (received !== opened.contentLength) throw new TruncatedBodyError(`GET ${key}`, opened.contentLength, received);
        return Buffer.concat(chunks, received);
      }),
    );
  }

  private async putSmall(key: string, body: Buffer, extra: { IfNoneMatch?: string; IfMatch?: string } = {}): Promise<void> {
    await this.retried(`PUT ${key}`, () =>
      this.budget.run(body.length, () =>
        this.client.send(
          new (sdk().PutObjectCommand)({ Bucket: this.bucket, Key: key, Body: body, ContentLength: body.length, ChecksumSHA256: sha256Base64(body), ...extra }),
        ),
      ),
    );
  }

  private async deleteObject(key: string): Promise<void> {
    await this.retried(`DELETE ${key}`, () => this.budget.run(0, () => this.client.send(new (sdk().DeleteObjectCommand)({ Bucket: this.bucket, Key: key }))));
  }

  private async *listKeys(relPrefix: string): AsyncGenerator<{ key: string; size: number; mtimeMs: number }> {
    const prefix = this.key(relPrefix);
    let token: string | undefined;
    do {
      const page = await this.retried(`LIST ${prefix}`, () =>
        this.budget.run(0, () =>
          this.client.send(
            new (sdk().ListObjectsV2Command)({
              Bucket: this.bucket,
              Prefix: prefix,
              MaxKeys: this.listPageSize,
              ...(token === undefined ? {} : { ContinuationToken: token }),
            }),
          ),
        ),
      );
      for (const o of page.Contents ?? []) {
        if (o.Key === undefined) continue;
        yield { key: o.Key.slice(prefix.length), size: o.Size ?? 0, mtimeMs: o.LastModified?.getTime() ?? 0 };
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  }

  // ---- blobs -------------------------------------------------------------------------------

  async statBlob(digest: Digest): Promise<BlobStat | null> {
    const h = await this.headObject(this.blobKey(digest));
    return h === null ? null : { size: h.size, mtimeMs: h.mtimeMs };
  }

  getBlob(digest: Digest): Promise<Buffer> {
    return this.getBytes(this.blobKey(digest), `blob ${digest}`);
  }

  async getBlobRange(digest: Digest, offset: number, length: number): Promise<Buffer> {
    checkRange(offset, length);
    if (length === 0) return Buffer.alloc(0);
    const b = await this.getRangeOrExplain(digest, offset, length);
    if (b.length !== length) throw rangePastEnd(digest, offset, length);
    return b;
  }

  private async getRangeOrExplain(digest: Digest, offset: number, length: number): Promise<Buffer> {
    try {
      return await this.getBytes(this.blobKey(digest), `blob ${digest}`, offset, offset + length);
    } catch (e) {
      if (e instanceof RemoteStoreError && e.status === 416) throw rangePastEnd(digest, offset, length);
      throw e;
    }
  }

  /**
   * Streams a blob (or a range). A body that breaks mid-way is resumed with a ranged GET from the
   * last byte received, so a multi-GB pack survives resets without starting over. Only opening a
   * request takes a slot of the in-flight budget: stream backpressure bounds the bytes, and
   * holding a slot while a caller is slow to read could deadlock callers with several streams open.
   */
  async openBlob(digest: Digest, range?: { offset: number; length: number }): Promise<Readable> {
    const key = this.blobKey(digest);
    const start = range?.offset ?? 0;
    if (range !== undefined) {
      checkRange(range.offset, range.length);
      if (range.length === 0) return Readable.from([], { objectMode: false });
    }
    const open = (from: number, end: number | undefined): Promise<OpenedBody> =>
      this.retried(`GET ${key}`, async () => {
        try {
          return await this.openBody(key, from, end);
        } catch (e) {
          if (isNotFound(e)) throw new NotFoundError(`blob ${digest} in ${this.url}`);
          if (httpStatusOf(e) === 416 && range !== undefined) throw rangePastEnd(digest, range.offset, range.length);
          throw e;
        }
      });
    const first = await open(start, range === undefined ? undefined : start + range.length);
    const end = range === undefined ? start + first.contentLength : start + range.length;
    if (range !== undefined && first.contentLength !== range.length) {
      first.body.destroy();
      throw rangePastEnd(digest, range.offset, range.length);
    }
    const policy = this.retry;
    const hooks = this.hooks;
    async function* chunks(): AsyncGenerator<Buffer> {
      let cur = first;
      let pos = start;
      let failures = 0;
      try {
        for (;;) {
          let error: unknown;
          try {
            for await (const chunk of cur.body) {
              let b = chunk as Buffer;
              if (pos + b.length > end) b = b.subarray(0, end - pos);
              pos += b.length;
              if (b.length > 0) yield b;
              if (pos >= end) break;
            }
          } catch (e) {
            if (!isRetryable(e)) throw new RemoteStoreError(`GET ${key}`, failures + 1, e);
            error = e;
          }
          if (pos >= end) return;
          failures++;
          error ??= new TruncatedBodyError(`GET ${key}`, end - start, pos - start);
          if (failures >= policy.attempts) throw new RemoteStoreError(`GET ${key}`, failures, error);
          const delayMs = backoffDelayMs(policy, failures);
          hooks.onRetry?.({ what: `GET ${key} (resume at ${pos})`, attempt: failures, delayMs, error });
          await new Promise((r) => setTimeout(r, delayMs));
          cur.body.destroy();
          cur = await open(pos, end);
        }
      } finally {
        cur.body.destroy();
      }
    }
    return Readable.from(chunks(), { objectMode: false });
  }

  /** True when the blob exists and need not be written: fresh, or too large to write again cheaply. */
  private async present(key: string): Promise<boolean> {
    const h = await this.headObject(key);
    return h !== null && (Date.now() - h.mtimeMs <= BLOB_REFRESH_AFTER_MS || h.size > this.partSize);
  }

  async putBlobFile(digest: Digest, path: string): Promise<void> {
    const key = this.blobKey(digest);
    if (await this.present(key)) return;
    const { size } = await stat(path);
    if (size > this.partSize) {
      await this.putMultipart(key, size, async (offset, length) => {
        const buf = Buffer.allocUnsafe(length);
        const fh = await open(path, 'r');
        try {
          let done = 0;
          while (done < length) {
            const { bytesRead } = await fh.read(buf, done, length - done, offset + done);
            if (bytesRead === 0) throw new InvalidInputError(`${path} shrank while it was uploaded`, 'do not modify files while pushing them');
            done += bytesRead;
          }
        } finally {
          await fh.close();
        }
        return buf;
      });
      return;
    }
    // The content digest doubles as S3's end-to-end upload check: the server rejects a body
    // whose sha256 differs (BadDigest), so a corrupted upload never becomes a blob.
    const checksum = Buffer.from(digestHex(digest), 'hex').toString('base64');
    await this.retried(`PUT ${key}`, () =>
      this.budget.run(size, () =>
        this.client.send(
          new (sdk().PutObjectCommand)({ Bucket: this.bucket, Key: key, Body: createReadStream(path), ContentLength: size, ChecksumSHA256: checksum }),
        ),
      ),
    );
  }

  async putBlob(digest: Digest, data: Buffer): Promise<void> {
    const key = this.blobKey(digest);
    if (await this.present(key)) return;
    if (data.length > this.partSize) {
      await this.putMultipart(key, data.length, (offset, length) => Promise.resolve(data.subarray(offset, offset + length)));
      return;
    }
    const checksum = Buffer.from(digestHex(digest), 'hex').toString('base64');
    await this.retried(`PUT ${key}`, () =>
      this.budget.run(data.length, () =>
        this.client.send(new (sdk().PutObjectCommand)({ Bucket: this.bucket, Key: key, Body: data, ContentLength: data.length, ChecksumSHA256: checksum })),
      ),
    );
  }

  /**
   * Multipart upload, `partConcurrency` parts at once, each part read into memory (bounded by the
   * byte budget), checksummed (sha256) and retried alone. The object appears only when Complete
   * succeeds; on any failure the upload is aborted, so no partial blob is ever visible.
   */
  private async putMultipart(key: string, size: number, readPart: (offset: number, length: number) => Promise<Buffer>): Promise<void> {
    const created = await this.retried(`CREATE-MULTIPART ${key}`, () =>
      this.budget.run(0, () => this.client.send(new (sdk().CreateMultipartUploadCommand)({ Bucket: this.bucket, Key: key, ChecksumAlgorithm: 'SHA256' }))),
    );
    const uploadId = created.UploadId;
    if (uploadId === undefined)
      throw new MinisandboxError('REMOTE_STORE', `CREATE-MULTIPART ${key}: no upload id in the answer`, {
        hint: 'the S3 server does not support multipart uploads; raise partSize above the largest blob',
      });
    // S3 allows at most 10,000 parts: very large blobs get larger parts.
    const partSize = Math.max(this.partSize, Math.ceil(size / 10_000));
    const count = Math.ceil(size / partSize);
    const parts: { PartNumber: number; ETag: string; ChecksumSHA256: string }[] = new Array(count);
    try {
      await runPool(
        Array.from({ length: count }, (_, i) => i),
        this.partConcurrency,
        async (i) => {
          const offset = i * partSize;
          const length = Math.min(partSize, size - offset);
          const release = await this.budget.acquire(length);
          try {
            const body = await readPart(offset, length);
            const checksum = sha256Base64(body);
            const r = await this.retried(`UPLOAD-PART ${i + 1}/${count} ${key}`, () =>
              this.client.send(
                new (sdk().UploadPartCommand)({
                  Bucket: this.bucket,
                  Key: key,
                  UploadId: uploadId,
                  PartNumber: i + 1,
                  Body: body,
                  ContentLength: length,
                  ChecksumSHA256: checksum,
                }),
              ),
            );
            if (r.ETag === undefined)
              throw new MinisandboxError('REMOTE_STORE', `UPLOAD-PART ${i + 1} ${key}: no ETag in the answer`, {
                hint: 'the S3 server answered a part upload without an ETag; check the server or proxy',
              });
            parts[i] = { PartNumber: i + 1, ETag: r.ETag, ChecksumSHA256: checksum };
          } finally {
            release();
          }
        },
      );
      await this.retried(`COMPLETE-MULTIPART ${key}`, async (attempt) => {
        // An earlier attempt may have landed with its answer lost; the upload id is then gone
        // (servers answer 404 or 500 to it), but the object is there.
        if (attempt > 1) {
          const h = await this.headObject(key);
          if (h !== null && h.size === size) {
            // Ours or a racing pusher's: either way the blob is whole; drop our upload if it lingers.
            await this.abortMultipart(key, uploadId);
            return;
          }
        }
        await this.budget.run(0, () =>
          this.client.send(
            new (sdk().CompleteMultipartUploadCommand)({ Bucket: this.bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
          ),
        );
      });
    } catch (e) {
      await this.abortMultipart(key, uploadId);
      throw e;
    }
  }

  private async abortMultipart(key: string, uploadId: string): Promise<void> {
    // Best effort with a short retry: the upload is invisible anyway, and a bucket lifecycle rule
    // (AbortIncompleteMultipartUpload) reclaims its parts if this fails too.
    try {
      await withRetry(`ABORT-MULTIPART ${key}`, { ...this.retry, attempts: Math.min(3, this.retry.attempts) }, () =>
        this.budget.run(0, () => this.client.send(new (sdk().AbortMultipartUploadCommand)({ Bucket: this.bucket, Key: key, UploadId: uploadId }))),
      );
    } catch {
      /* reported by the original error; nothing is visible */
    }
  }

  async deleteBlob(digest: Digest): Promise<void> {
    await this.deleteObject(this.blobKey(digest));
  }

  async *listBlobs(): AsyncIterable<{ digest: Digest } & BlobStat> {
    for await (const o of this.listKeys('blobs/sha256/')) {
      const d = DigestSchema.safeParse(`sha256:${o.key}`);
      // Stray keys (temporary or foreign objects) are not blobs; gc and verify ignore them.
      if (d.success) yield { digest: d.data, size: o.size, mtimeMs: o.mtimeMs };
    }
  }

  // ---- pack catalog ----------------------------------------------------------------------

  async putPack(pack: Digest, index: Digest): Promise<void> {
    await this.putSmall(this.packKey(pack), Buffer.from(`${parseDigest(index)}\n`));
  }

  async *listPacks(): AsyncIterable<{ pack: Digest; index: Digest }> {
    for await (const { name, digest } of this.readEntries('packs/', (rel) => DigestSchema.safeParse(`sha256:${rel}`).success)) {
      yield { pack: `sha256:${name}`, index: digest };
    }
  }

  async deletePack(pack: Digest): Promise<void> {
    await this.deleteObject(this.packKey(pack));
  }

  // ---- gc ----------------------------------------------------------------------------------

  async getGcState(): Promise<Buffer | null> {
    try {
      return await this.getBytes(this.key('gc/state.json'), 'gc state');
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
  }

  async putGcState(data: Buffer): Promise<void> {
    await this.putSmall(this.key('gc/state.json'), data);
  }

  // ---- refs --------------------------------------------------------------------------------

  async getRef(name: string): Promise<Digest | null> {
    const key = this.refKey(name);
    try {
      return parseDigestBody(`ref ${name}`, await this.getBytes(key, `ref ${name}`));
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
  }

  /** Last writer wins (see the rule at the top of this file). */
  async putRef(name: string, digest: Digest): Promise<void> {
    const key = this.refKey(name);
    const body = Buffer.from(`${parseDigest(digest)}\n`);
    for (let round = 1; ; round++) {
      const cur = await this.headObject(key);
      if (await this.conditionalPut(key, body, cur?.etag ?? null)) return;
      if (round >= this.retry.attempts) {
        throw new MinisandboxError('REF_CONTENDED', `ref ${name} in ${this.url} kept changing while it was written (${round} rounds)`, {
          hint: 'another writer updates this ref in a tight loop; retry later',
        });
      }
    }
  }

  /**
   * Sets ref `name` to `next` only if it currently is `expected` (null: absent). Returns false if
   * another writer got there first. Atomic on servers with conditional writes; on servers that
   * ignore them it degrades to check-then-write (last writer wins).
   */
  async compareAndSwapRef(name: string, expected: Digest | null, next: Digest): Promise<boolean> {
    const key = this.refKey(name);
    let etag: string | null = null;
    if (expected !== null) {
      const h = await this.headObject(key);
      if (h === null) return false;
      if ((await this.getRef(name)) !== expected) return false;
      etag = h.etag ?? null;
      if (etag === null)
        throw new MinisandboxError('REMOTE_STORE', `HEAD ${key}: no ETag`, {
          hint: 'the S3 server does not return ETags; conditional ref updates are impossible there',
        });
    } else if ((await this.headObject(key)) !== null) {
      return false;
    }
    if (await this.conditionalPut(key, Buffer.from(`${parseDigest(next)}\n`), etag)) return true;
    // A retried write whose first attempt landed (answer lost) fails its own precondition.
    return (await this.getRef(name)) === next;
  }

  private async conditionalPut(key: string, body: Buffer, etag: string | null): Promise<boolean> {
    try {
      await this.putSmall(key, body, etag === null ? { IfNoneMatch: '*' } : { IfMatch: etag });
      return true;
    } catch (e) {
      if (e instanceof RemoteStoreError ? e.status === 412 || e.remoteCode === 'PreconditionFailed' : isPreconditionFailed(e)) return false;
      throw e;
    }
  }

  async deleteRef(name: string): Promise<void> {
    await this.deleteObject(this.refKey(name));
  }

  async *listRefs(): AsyncIterable<{ name: string; digest: Digest }> {
    for await (const e of this.readEntries('refs/', (rel) => parseRefNameSafe(rel))) yield e;
  }

  /**
   * Lists keys under `relPrefix` and reads each small body as a digest, a few at a time, in key
   * order. An entry deleted between listing and reading is skipped.
   */
  private async *readEntries(relPrefix: string, accept: (rel: string) => boolean): AsyncGenerator<{ name: string; digest: Digest }> {
    for await (const e of this.readBodies(relPrefix, accept)) yield { name: e.name, digest: parseDigestBody(`${relPrefix}${e.name}`, e.body) };
  }

  async *listRefEntries(): AsyncIterable<RefEntry> {
    for await (const { name, body } of this.readBodies('refs/', () => true)) {
      const problem = refNameProblem(name) ?? refBodyProblem(body.toString('utf8'));
      if (problem === null) yield { name, digest: parseDigest(body.toString('utf8').trim()) };
      else yield { name, digest: null, broken: problem };
    }
  }

  /** The bodies of the keys under `relPrefix`, read a few at a time, in key order. */
  private async *readBodies(relPrefix: string, accept: (rel: string) => boolean): AsyncGenerator<{ name: string; body: Buffer }> {
    const window: { name: string; body: Promise<Buffer | null> }[] = [];
    const read = (name: string): Promise<Buffer | null> =>
      this.getBytes(this.key(relPrefix + name), `${relPrefix}${name}`).catch((e: unknown) => {
        if (e instanceof NotFoundError) return null;
        throw e;
      });
    const drainOne = async (): Promise<{ name: string; body: Buffer } | null> => {
      const head = window.shift();
      if (head === undefined) return null;
      const body = await head.body;
      return body === null ? null : { name: head.name, body };
    };
    try {
      for await (const o of this.listKeys(relPrefix)) {
        if (!accept(o.key)) continue;
        window.push({ name: o.key, body: read(o.key) });
        if (window.length >= 8) {
          const e = await drainOne();
          if (e !== null) yield e;
        }
      }
      while (window.length > 0) {
        const e = await drainOne();
        if (e !== null) yield e;
      }
    } finally {
      // Settle reads left behind by an early exit so none rejects unobserved.
      for (const w of window) w.body.catch(() => undefined);
    }
  }
}

function parseRefNameSafe(name: string): boolean {
  try {
    parseRefName(name);
    return true;
  } catch {
    return false;
  }
}

function checkRange(offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new InvalidInputError(`invalid blob range offset=${offset} length=${length}`, 'offsets and lengths are non-negative integers');
  }
}

function rangePastEnd(digest: Digest, offset: number, length: number): InvalidInputError {
  return new InvalidInputError(
    `range [${offset}, ${offset + length}) reaches past the end of blob ${digest}`,
    'the pack index does not match its pack; run `minisandbox verify`',
  );
}
