/**
 * A pull-only client of the OCI distribution API (Docker Registry v2): manifests by tag or
 * digest, blobs as resumable streams. Anonymous, Basic and bearer-token auth (the
 * `WWW-Authenticate` realm/service/scope flow); transient failures (connection errors, 5xx, 429,
 * a body cut short, a registry gone silent or too slow) are retried with backoff, a blob resuming
 * with a Range request from the byte it reached. Every body is read through one bounded reader
 * (bounded-read.ts): a size cap on the bytes received, a silence limit, a deadline for documents
 * and a least rate for blobs. Every manifest and blob is verified by the caller against its digest.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Digest, sha256 } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { basicHeader, type Credentials, findCredentials, parseChallenge } from './auth.js';
import { Exchange, type ReadBounds, ReadStalled, type TooLarge } from './bounded-read.js';
import { type Descriptor, MEDIA, type Platform } from './oci-schema.js';
import { DOCKER_HUB, type SourceRef } from './reference.js';
import { type BlobReader, type ImageSource, type ResolvedImage, resolveFrom, verified } from './source.js';

export interface RegistryClientOptions {
  /** false: talk plain HTTP (a local registry without TLS), as skopeo's --tls-verify=false. */
  tlsVerify?: boolean;
  /** A credentials file read before the usual ones. */
  authFile?: string;
  /** Explicit credentials (override the files). */
  credentials?: Credentials;
  /** Attempts per request, the first included (default 5). */
  attempts?: number;
  /** Backoff before the first retry, doubled each time (default 200 ms). */
  retryDelayMs?: number;
  /** Milliseconds without a byte, while one is awaited, before a request is abandoned and retried (default 20 s). */
  silenceMs?: number;
  /** Milliseconds a manifest, config or token may take, request to last byte (default 60 s). */
  deadlineMs?: number;
  /** Least average rate of a layer blob over each `silenceMs` of waiting (default 1 KiB/s). */
  minBytesPerSecond?: number;
}

export class RegistryAuthError extends MinisandboxError {
  constructor(what: string, hadCredentials: boolean) {
    super(
      'AUTH_REQUIRED',
      `${what}: the registry refused access (401/403)${hadCredentials ? ' with the credentials found' : ' and no credentials were found'}`,
      {
        hint: hadCredentials
          ? 'check the user and password (podman login HOST), or the repository name'
          : 'log in first (podman login HOST or docker login HOST), or pass --authfile FILE',
      },
    );
  }
}

class RetryableError extends Error {}

const MANIFEST_ACCEPT = [MEDIA.ociManifest, MEDIA.ociIndex, MEDIA.dockerManifest, MEDIA.dockerList].join(', ');
/** The most a manifest, an index or a config may be (real ones are a few KiB; a large index some 100 KiB). */
const MAX_MANIFEST = 4 << 20;
/** The most a token server's answer may be (a JWT of a few KiB in JSON). */
const MAX_TOKEN = 1 << 20;
/** The first bytes of an error answer kept for its message. */
const MAX_ERROR_TEXT = 300;
/**
 * Attempts in a row that met silence after which a request fails at once, as the S3 client does
 * (retry.ts): a stopped server keeps connections open and answers nothing, and every attempt
 * would wait out the whole silence limit.
 */
const SILENT_IN_A_ROW = 3;

export class RegistryClient {
  private token: string | undefined;
  private readonly base: string;
  private readonly creds: Credentials | undefined;
  private readonly attempts: number;
  private readonly delay: number;
  /** Manifests, configs, tokens: read whole, so bounded in total time. */
  private readonly documentBounds: ReadBounds;
  /** Layer blobs: any size, so bounded in rate. */
  private readonly streamBounds: ReadBounds;

  constructor(
    readonly host: string,
    readonly repository: string,
    opts: RegistryClientOptions = {},
  ) {
    const endpoint = host === DOCKER_HUB ? 'registry-1.docker.io' : host;
    this.base = `${opts.tlsVerify === false ? 'http' : 'https'}://${endpoint}/v2/${repository}`;
    this.creds = opts.credentials ?? findCredentials(host, opts.authFile);
    this.attempts = Math.max(1, opts.attempts ?? 5);
    this.delay = opts.retryDelayMs ?? 200;
    const silenceMs = opts.silenceMs ?? 20_000;
    this.documentBounds = { silenceMs, deadlineMs: opts.deadlineMs ?? 60_000 };
    this.streamBounds = { silenceMs, minBytesPerSecond: opts.minBytesPerSecond ?? 1024 };
  }

  /** `op` retried on transient failures; typed errors (an answer, not a failure) pass at once. */
  private async retried<T>(what: string, op: () => Promise<T>): Promise<T> {
    let lastErr: unknown;
    let tried = 0;
    let silent = 0;
    while (tried < this.attempts) {
      try {
        tried++;
        return await op();
      } catch (e) {
        if (e instanceof MinisandboxError) throw e;
        lastErr = e;
        silent = e instanceof ReadStalled && e.kind === 'silent' ? silent + 1 : 0;
        if (silent >= SILENT_IN_A_ROW) break;
        if (tried < this.attempts) await sleep(this.delay * 2 ** (tried - 1));
      }
    }
    throw new MinisandboxError('REGISTRY_UNREACHABLE', `${what} from ${this.host}: failed after ${tried} attempts: ${describe(lastErr)}`, {
      hint: this.hint(lastErr, `check that ${this.host} is reachable (plain HTTP needs --tls-verify=false); transient failures were retried`),
    });
  }

  private hint(e: unknown, otherwise: string): string {
    const rerun = 'a rerun resumes with the layers already converted';
    return e instanceof ReadStalled
      ? `${this.host} accepted the connection but stopped sending, or sends too slowly: check that it is up and not overloaded; ${rerun}`
      : `${otherwise}; ${rerun}`;
  }

  /** One request with auth (a 401 answered once per challenge); the answer's status checked. */
  private async open(path: string, headers: Record<string, string>, what: string, bounds: ReadBounds): Promise<Exchange> {
    let ex = await this.send(path, headers, bounds);
    if (ex.status === 401) {
      const challenge = ex.header('www-authenticate');
      ex.close();
      if (challenge === null) throw new RegistryAuthError(what, this.creds !== undefined);
      await this.authenticate(challenge, what);
      ex = await this.send(path, headers, bounds);
      if (ex.status === 401 || ex.status === 403) {
        ex.close();
        throw new RegistryAuthError(what, this.creds !== undefined);
      }
    }
    if (ex.status === 403) {
      ex.close();
      throw new RegistryAuthError(what, this.creds !== undefined);
    }
    if (ex.status === 404) {
      ex.close();
      throw new NotFoundError(`${what} at ${this.base}`, 'check the repository, tag or digest (skopeo inspect docker://...)');
    }
    if (ex.status === 429 || ex.status >= 500) {
      ex.close();
      throw new RetryableError(`HTTP ${ex.status}`);
    }
    if (ex.status >= 400) {
      const body = (await ex.readSome(MAX_ERROR_TEXT)).toString();
      throw new MinisandboxError('REGISTRY_ERROR', `${what} from ${this.host}: HTTP ${ex.status} ${body}`, { hint: "see the registry's message above" });
    }
    return ex;
  }

  private async send(path: string, headers: Record<string, string>, bounds: ReadBounds): Promise<Exchange> {
    const h: Record<string, string> = { ...headers };
    if (this.token !== undefined) h['authorization'] = this.token;
    return Exchange.open(`${this.base}/${path}`, { headers: h, redirect: 'follow' }, bounds);
  }

  private async authenticate(header: string, what: string): Promise<void> {
    const c = parseChallenge(header);
    if (c.scheme === 'basic') {
      if (this.creds === undefined) throw new RegistryAuthError(what, false);
      this.token = basicHeader(this.creds);
      return;
    }
    if (c.scheme !== 'bearer' || c.params['realm'] === undefined)
      throw new MinisandboxError('REGISTRY_ERROR', `${what}: unsupported auth challenge ${JSON.stringify(header)}`);
    const url = new URL(c.params['realm']);
    if (c.params['service'] !== undefined) url.searchParams.set('service', c.params['service']);
    url.searchParams.set('scope', c.params['scope'] ?? `repository:${this.repository}:pull`);
    const where = `token server ${url.origin}`;
    // a stall is retried with the request it authenticates; a server not there at all is not
    const ex = await Exchange.open(url, { headers: this.creds === undefined ? {} : { authorization: basicHeader(this.creds) } }, this.documentBounds).catch(
      (e: unknown) => {
        if (e instanceof ReadStalled) throw e.of(where);
        throw new MinisandboxError('REGISTRY_UNREACHABLE', `${what}: ${where} unreachable: ${describe(e)}`, { hint: 'check the network' });
      },
    );
    let bytes: Buffer;
    try {
      if (ex.status === 401 || ex.status === 403) throw new RegistryAuthError(what, this.creds !== undefined);
      if (ex.status < 200 || ex.status >= 300) throw new MinisandboxError('REGISTRY_ERROR', `${what}: ${where} answered HTTP ${ex.status}`);
      bytes = await ex
        .readAll(
          MAX_TOKEN,
          () => new InvalidInputError(`${what}: ${where} sent more than ${MAX_TOKEN} bytes`, 'a token is a few KiB: the token server is broken or hostile'),
        )
        .catch((e: unknown) => {
          throw e instanceof ReadStalled ? e.of(where) : e;
        });
    } finally {
      ex.close();
    }
    let body: { token?: unknown; access_token?: unknown } | undefined;
    try {
      body = JSON.parse(bytes.toString()) as typeof body;
    } catch {
      throw new MinisandboxError('REGISTRY_ERROR', `${what}: ${where} answered with no JSON`);
    }
    const tok = typeof body?.token === 'string' ? body.token : typeof body?.access_token === 'string' ? body.access_token : undefined;
    if (tok === undefined) throw new MinisandboxError('REGISTRY_ERROR', `${what}: the token server gave no token`);
    this.token = `Bearer ${tok}`;
  }

  /** One attempt at a document read whole, at most `max` bytes, within the document bounds. */
  private async document(
    path: string,
    headers: Record<string, string>,
    what: string,
    max: number,
    tooLarge: TooLarge,
  ): Promise<{ bytes: Buffer; type: string | null }> {
    const ex = await this.open(path, headers, what, this.documentBounds);
    try {
      const declared = Number(ex.header('content-length') ?? '0');
      if (declared > max) throw tooLarge(declared);
      return { bytes: await ex.readAll(max, tooLarge), type: ex.header('content-type') };
    } finally {
      ex.close();
    }
  }

  /** A manifest (or index) by tag or digest, with its digest; verified when asked by digest. */
  async manifest(reference: string): Promise<{ bytes: Buffer; digest: Digest; mediaType: string | undefined }> {
    const what = `manifest ${this.repository}:${reference}`;
    const tooLarge: TooLarge = () =>
      new InvalidInputError(`${what} from ${this.host} is larger than ${MAX_MANIFEST} bytes`, 'not an image manifest: the registry is broken or hostile');
    const { bytes, type } = await this.retried(what, () => this.document(`manifests/${reference}`, { accept: MANIFEST_ACCEPT }, what, MAX_MANIFEST, tooLarge));
    const digest = sha256(bytes);
    if (reference.startsWith('sha256:') && digest !== reference) throw new DigestMismatchError(what, reference, digest);
    const ct = type?.split(';')[0]?.trim();
    return { bytes, digest, mediaType: ct === '' || ct === 'application/json' ? undefined : ct };
  }

  /** An image config, read whole: no more bytes than its descriptor declares. */
  async smallBlob(d: Descriptor): Promise<Buffer> {
    const what = `blob ${d.digest} (config)`;
    if (d.size > MAX_MANIFEST) throw new InvalidInputError(`${what} is ${d.size} bytes, too large for a config`);
    const tooLarge: TooLarge = () =>
      new InvalidInputError(`${what} from ${this.host} sent more than the ${d.size} bytes its descriptor declares`, 'the registry is broken or hostile');
    const bytes = await this.retried(what, async () => {
      const { bytes: b } = await this.document(`blobs/${d.digest}`, {}, what, d.size, tooLarge);
      if (b.length < d.size) throw new RetryableError(`body ended after ${b.length} of ${d.size} bytes`);
      return b;
    });
    return verified(`${what} of ${this.repository}`, d.digest, bytes);
  }

  /**
   * A blob's bytes as a stream that survives broken connections: a body cut short, gone silent or
   * too slow is resumed from the byte reached (Range), a bounded number of times. The caller
   * verifies the digest.
   */
  async *blob(d: Descriptor): AsyncGenerator<Buffer> {
    const what = `blob ${d.digest}`;
    let offset = 0;
    let failures = 0;
    let silent = 0;
    for (;;) {
      const headers: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
      const ex = await this.retried(what, () => this.open(`blobs/${d.digest}`, headers, what, this.streamBounds));
      // a server that ignores Range sends the whole blob again: skip what we have
      let skip = offset > 0 && ex.status !== 206 ? offset : 0;
      try {
        for await (const chunk of ex.chunks()) {
          let b = chunk;
          if (skip > 0) {
            const n = Math.min(skip, b.length);
            skip -= n;
            b = b.subarray(n);
            if (b.length === 0) continue;
          }
          offset += b.length;
          silent = 0;
          if (offset > d.size) throw new DigestMismatchError(`${what} from ${this.host}`, `${d.size} bytes`, `more than ${d.size} bytes`);
          yield b;
        }
        if (offset >= d.size) return;
        throw new RetryableError(`body ended after ${offset} of ${d.size} bytes`);
      } catch (e) {
        if (e instanceof MinisandboxError) throw e;
        silent = e instanceof ReadStalled && e.kind === 'silent' ? silent + 1 : 0;
        if (++failures >= this.attempts || silent >= SILENT_IN_A_ROW) {
          throw new MinisandboxError(
            'REGISTRY_UNREACHABLE',
            `${what} from ${this.host}: the transfer broke ${failures} times, last after ${offset} of ${d.size} bytes: ${describe(e)}`,
            { hint: this.hint(e, `check that ${this.host} is up and reachable`) },
          );
        }
        await sleep(this.delay * 2 ** (failures - 1));
      } finally {
        ex.close();
      }
    }
  }
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message} (${cause.message})` : e.message;
  }
  return String(e);
}

/** `docker://HOST/REPO:TAG|@DIGEST` */
export class RegistrySource implements ImageSource {
  readonly name: string;
  private readonly client: RegistryClient;
  constructor(
    private readonly ref: Extract<SourceRef, { kind: 'docker' }>,
    opts: RegistryClientOptions,
  ) {
    this.name = ref.text;
    this.client = new RegistryClient(ref.registry, ref.repository, opts);
  }

  async resolve(platform: Platform): Promise<ResolvedImage> {
    const m = await this.client.manifest(this.ref.digest ?? this.ref.tag ?? 'latest');
    const reader: BlobReader = {
      small: (d) => this.client.smallBlob(d),
      manifest: async (d) => (await this.client.manifest(d.digest)).bytes,
      stream: (d) => this.client.blob(d),
    };
    const desc: Descriptor = { digest: m.digest, size: m.bytes.length, ...(m.mediaType === undefined ? {} : { mediaType: m.mediaType }) };
    return resolveFrom(reader, desc, m.bytes, platform, this.name);
  }
}
