/**
 * A registry on loopback that misbehaves as a hostile or broken one does: it serves an OCI
 * layout over the distribution API (manifests by tag or digest, blobs with Range, optionally
 * behind the bearer-token flow), and answers what a test names with an endless chunked body, a
 * drip of one byte at a time, a stall half-way through a blob with the connection left open, or
 * nothing at all (the request read, no status line ever sent). It counts what it sent, so a test
 * can tell a client that hung up at its limit from one that swallowed everything.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

/** What a request asks for: the image's manifest, its config blob, a layer blob, or a token. */
export type Target = 'manifest' | 'config' | 'layer' | 'token';

export type Misbehaviour =
  /** A chunked (length-less) body that never ends, sent as fast as the client takes it. */
  | 'endless'
  /** Headers at once, then one byte every `dripMs`: whitespace for documents, the real bytes of a blob. */
  | 'drip'
  /** The request is read and never answered; the connection stays open. */
  | 'silent'
  /** A blob's headers and first half, then nothing; the connection stays open. */
  | 'stall-half';

export interface Fault {
  does: Misbehaviour;
  /** Requests of the target that misbehave before it is served well again (default: all). */
  times?: number;
}

export interface HostileRegistry {
  /** host:port, for `docker://HOST/REPO:TAG` with `tlsVerify: false`. */
  host: string;
  repository: string;
  faults: Partial<Record<Target, Fault>>;
  dripMs: number;
  /** Every request, `METHOD target` with ` range` when it asked for one. */
  log: string[];
  /** Most body bytes sent in answer to one request, by target. */
  maxSent: Partial<Record<Target, number>>;
  stop(): Promise<void>;
}

/** No endless body goes beyond this, so a client that reads without a limit fails a test instead of the machine. */
const ENDLESS_CAP = 256 << 20;

export async function startHostileRegistry(layoutDir: string, opts: { repository?: string; bearer?: boolean } = {}): Promise<HostileRegistry> {
  const repository = opts.repository ?? 'hostile/img';
  const index = JSON.parse(readFileSync(join(layoutDir, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string; mediaType: string }> };
  const top = index.manifests[0]!;
  const blob = (digest: string): Buffer | undefined => {
    try {
      return readFileSync(join(layoutDir, 'blobs', 'sha256', digest.replace(/^sha256:/, '')));
    } catch {
      return undefined;
    }
  };
  const manifest = blob(top.digest)!;
  const configDigest = (JSON.parse(manifest.toString()) as { config: { digest: string } }).config.digest;
  const token = `tok-${Math.random().toString(36).slice(2)}`;
  const state: HostileRegistry = {
    host: '',
    repository,
    faults: {},
    dripMs: 250,
    log: [],
    maxSent: {},
    stop: async () => undefined,
  };
  const timers = new Set<NodeJS.Timeout>();

  /** The fault to apply to this request of `target`, counted down. */
  const take = (target: Target): Misbehaviour | undefined => {
    const f = state.faults[target];
    if (f === undefined) return undefined;
    if (f.times !== undefined) {
      if (f.times <= 0) return undefined;
      f.times--;
    }
    return f.does;
  };
  const sent = (target: Target, n: number): void => {
    state.maxSent[target] = Math.max(state.maxSent[target] ?? 0, n);
  };

  const endless = (res: ServerResponse, target: Target, contentType: string): void => {
    res.writeHead(200, { 'content-type': contentType }); // no content-length: chunked
    const chunk = Buffer.alloc(64 << 10, 0x20);
    let n = 0;
    const pump = (): void => {
      while (!res.destroyed && n < ENDLESS_CAP) {
        n += chunk.length;
        sent(target, n);
        if (!res.write(chunk)) {
          res.once('drain', pump);
          return;
        }
      }
      if (!res.destroyed) res.end();
    };
    pump();
  };

  const drip = (res: ServerResponse, target: Target, headers: Record<string, string | number>, body: Buffer | undefined): void => {
    res.writeHead(200, headers);
    let i = 0;
    const t = setInterval(() => {
      if (res.destroyed || (body !== undefined && i >= body.length)) {
        clearInterval(t);
        timers.delete(t);
        if (!res.destroyed) res.end();
        return;
      }
      res.write(body === undefined ? ' ' : body.subarray(i, i + 1));
      sent(target, ++i);
    }, state.dripMs);
    timers.add(t);
  };

  /** A document or blob answered well, or as the fault says. */
  const answer = (req: IncomingMessage, res: ServerResponse, target: Target, body: Buffer, contentType: string): void => {
    const does = take(target);
    if (does === 'silent') return; // read (below) and forgotten
    if (does === 'endless') {
      endless(res, target, contentType);
      return;
    }
    if (does === 'drip') {
      // blobs drip their real bytes under their real length; documents drip whitespace forever
      const blob = target === 'layer' || target === 'config';
      drip(res, target, blob ? { 'content-type': contentType, 'content-length': body.length } : { 'content-type': contentType }, blob ? body : undefined);
      return;
    }
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = range === null ? 0 : Number(range[1]);
    const part = body.subarray(from);
    res.writeHead(range === null ? 200 : 206, {
      'content-type': contentType,
      'content-length': part.length,
      ...(range === null ? {} : { 'content-range': `bytes ${from}-${body.length - 1}/${body.length}` }),
    });
    if (does === 'stall-half') {
      const half = part.subarray(0, Math.floor(part.length / 2));
      sent(target, half.length);
      res.write(half); // and nothing more, the connection left open
      return;
    }
    sent(target, part.length);
    res.end(part);
  };

  const server = createServer((req, res) => {
    req.resume();
    const url = new URL(req.url ?? '/', 'http://registry');
    const p = url.pathname;
    if (p === '/token') {
      state.log.push(`GET token`);
      return answer(req, res, 'token', Buffer.from(JSON.stringify({ token })), 'application/json');
    }
    if (p === '/v2/' || p === '/v2') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    if (opts.bearer === true && req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, {
        'www-authenticate': `Bearer realm="http://${state.host}/token",service="hostile",scope="repository:${repository}:pull"`,
        'content-type': 'application/json',
      });
      return void res.end('{"errors":[{"code":"UNAUTHORIZED"}]}');
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(p);
    if (m === null || m[1] !== repository) return void res.writeHead(404).end();
    if (m[2] === 'manifests') {
      if (m[3] !== 'latest' && m[3] !== top.digest) return void res.writeHead(404).end();
      state.log.push(`GET manifest`);
      return answer(req, res, 'manifest', manifest, top.mediaType);
    }
    const b = blob(m[3]!);
    if (b === undefined) return void res.writeHead(404).end();
    const target: Target = m[3] === configDigest ? 'config' : 'layer';
    state.log.push(`GET ${target}${req.headers.range === undefined ? '' : ' range'}`);
    answer(req, res, target, b, 'application/octet-stream');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.stop = () =>
    new Promise<void>((resolve) => {
      for (const t of timers) clearInterval(t);
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return state;
}
