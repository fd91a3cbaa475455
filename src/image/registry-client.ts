/**
 * A pull-only client of the OCI distribution API (Docker Registry v2): manifests by tag or
 * digest, blobs as resumable streams. Anonymous, Basic and bearer-token auth (the
 * `WWW-Authenticate` realm/service/scope flow); transient failures (connection errors, 5xx, 429,
 * a body cut short) are retried with backoff, a blob resuming with a Range request from the
 * byte it reached. Every manifest and blob is verified by the caller against its digest.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Digest, sha256 } from '../cas/digest.js';
import { DigestMismatchError, InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import { basicHeader, type Credentials, findCredentials, parseChallenge } from './auth.js';
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
const MAX_MANIFEST = 4 << 20;

export class RegistryClient {
  private token: string | undefined;
  private readonly base: string;
  private readonly creds: Credentials | undefined;
  private readonly attempts: number;
  private readonly delay: number;

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
  }

  /** One request with auth (a 401 answered once per challenge) and retries of transient failures. */
  private async fetch(path: string, headers: Record<string, string>, what: string): Promise<Response> {
    let lastErr: unknown;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      try {
        let res = await this.send(path, headers);
        if (res.status === 401) {
          const challenge = res.headers.get('www-authenticate');
          await res.body?.cancel();
          if (challenge === null) throw new RegistryAuthError(what, this.creds !== undefined);
          await this.authenticate(challenge, what);
          res = await this.send(path, headers);
          if (res.status === 401 || res.status === 403) {
            await res.body?.cancel();
            throw new RegistryAuthError(what, this.creds !== undefined);
          }
        }
        if (res.status === 403) {
          await res.body?.cancel();
          throw new RegistryAuthError(what, this.creds !== undefined);
        }
        if (res.status === 404) {
          await res.body?.cancel();
          throw new NotFoundError(`${what} at ${this.base}`, 'check the repository, tag or digest (skopeo inspect docker://...)');
        }
        if (res.status === 429 || res.status >= 500) {
          await res.body?.cancel();
          throw new RetryableError(`${what}: HTTP ${res.status}`);
        }
        if (res.status >= 400) {
          const body = (await res.text()).slice(0, 300);
          throw new MinisandboxError('REGISTRY_ERROR', `${what}: HTTP ${res.status} ${body}`, { hint: "see the registry's message above" });
        }
        return res;
      } catch (e) {
        if (e instanceof MinisandboxError) throw e;
        lastErr = e;
        if (attempt < this.attempts) await sleep(this.delay * 2 ** (attempt - 1));
      }
    }
    throw new MinisandboxError('REGISTRY_UNREACHABLE', `${what}: failed after ${this.attempts} attempts: ${describe(lastErr)}`, {
      hint:
        `check that ${this.host} is reachable (plain HTTP needs --tls-verify=false); transient ` +
        `failures were retried, and a rerun resumes with the layers already converted`,
    });
  }

  private async send(path: string, headers: Record<string, string>): Promise<Response> {
    const h: Record<string, string> = { ...headers };
    if (this.token !== undefined) h['authorization'] = this.token;
    return fetch(`${this.base}/${path}`, { headers: h, redirect: 'follow' });
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
    const res = await fetch(url, { headers: this.creds === undefined ? {} : { authorization: basicHeader(this.creds) } }).catch((e: unknown) => {
      throw new MinisandboxError('REGISTRY_UNREACHABLE', `${what}: token server ${url.origin} unreachable: ${describe(e)}`, { hint: 'check the network' });
    });
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel();
      throw new RegistryAuthError(what, this.creds !== undefined);
    }
    if (!res.ok) throw new MinisandboxError('REGISTRY_ERROR', `${what}: token server answered HTTP ${res.status}`);
    const body = (await res.json()) as { token?: unknown; access_token?: unknown };
    const tok = typeof body.token === 'string' ? body.token : typeof body.access_token === 'string' ? body.access_token : undefined;
    if (tok === undefined) throw new MinisandboxError('REGISTRY_ERROR', `${what}: the token server gave no token`);
    this.token = `Bearer ${tok}`;
  }

  /** A manifest (or index) by tag or digest, with its digest; verified when asked by digest. */
  async manifest(reference: string): Promise<{ bytes: Buffer; digest: Digest; mediaType: string | undefined }> {
    const what = `manifest ${this.repository}:${reference}`;
    const res = await this.fetch(`manifests/${reference}`, { accept: MANIFEST_ACCEPT }, what);
    const len = Number(res.headers.get('content-length') ?? '0');
    if (len > MAX_MANIFEST) throw new InvalidInputError(`${what} is ${len} bytes`, 'not an image manifest');
    const bytes = Buffer.from(await res.arrayBuffer());
    if (bytes.length > MAX_MANIFEST) throw new InvalidInputError(`${what} is too large`);
    const digest = sha256(bytes);
    if (reference.startsWith('sha256:') && digest !== reference) throw new DigestMismatchError(what, reference, digest);
    const ct = res.headers.get('content-type')?.split(';')[0]?.trim();
    return { bytes, digest, mediaType: ct === '' || ct === 'application/json' ? undefined : ct };
  }

  async smallBlob(d: Descriptor): Promise<Buffer> {
    if (d.size > MAX_MANIFEST) throw new InvalidInputError(`blob ${d.digest} is ${d.size} bytes, too large for a config`);
    const res = await this.fetch(`blobs/${d.digest}`, {}, `blob ${d.digest}`);
    return verified(`blob ${d.digest} of ${this.repository}`, d.digest, Buffer.from(await res.arrayBuffer()));
  }

  /**
   * A blob's bytes as a stream that survives broken connections: a body cut short is resumed
   * from the byte reached (Range), a bounded number of times. The caller verifies the digest.
   */
  async *blob(d: Descriptor): AsyncGenerator<Buffer> {
    let offset = 0;
    let failures = 0;
    for (;;) {
      const headers: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
      const res = await this.fetch(`blobs/${d.digest}`, headers, `blob ${d.digest}`);
      // a server that ignores Range sends the whole blob again: skip what we have
      let skip = offset > 0 && res.status !== 206 ? offset : 0;
      try {
        if (res.body === null) throw new RetryableError('no body');
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          let b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
          if (skip > 0) {
            const n = Math.min(skip, b.length);
            skip -= n;
            b = b.subarray(n);
            if (b.length === 0) continue;
          }
          offset += b.length;
          if (offset > d.size) throw new DigestMismatchError(`blob ${d.digest}`, `${d.size} bytes`, `more than ${d.size} bytes`);
          yield b;
        }
        if (offset >= d.size) return;
        throw new RetryableError(`body ended after ${offset} of ${d.size} bytes`);
      } catch (e) {
        if (e instanceof MinisandboxError) throw e;
        if (++failures >= this.attempts) {
          throw new MinisandboxError(
            'REGISTRY_UNREACHABLE',
            `blob ${d.digest}: the transfer broke ${failures} times, last after ${offset} of ${d.size} bytes: ${describe(e)}`,
            {
              hint: `check that ${this.host} is up and reachable; a rerun resumes with the layers already converted`,
            },
          );
        }
        await sleep(this.delay * 2 ** (failures - 1));
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
