/**
 * Real container images and a real registry for import tests, with no network: images are made
 * by buildah (in a storage root of their own) from a local busybox rootfs; the registry is
 * Debian's `docker-registry` (the distribution registry) on loopback; a small token-auth front
 * in front of it implements the bearer flow and injects faults (a flipped byte, a connection cut
 * mid-blob).
 */
import { createHash } from 'node:crypto';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, linkSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as netServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';

function run(cmd: string, args: string[], opts: { input?: string } = {}): string {
  return execFileSync(cmd, args, {
    encoding: 'utf8',
    stdio: ['pipe', 'pipe', 'pipe'],
    ...(opts.input === undefined ? {} : { input: opts.input }),
    maxBuffer: 64 << 20,
  });
}

export interface TestImages {
  /** buildah/podman flags selecting the private storage. */
  storage: string[];
  base: string;
  app1: string;
  app2: string;
  /** `containers-storage:` reference for skopeo. */
  cs(name: string): string;
}

/**
 * base: busybox, /etc/passwd with user `app`, /data/gone.txt, /opq/old.txt;
 * app1 (on base): gone.txt deleted, /opq made opaque (old.txt hidden, new.txt added), a
 *   hardlink pair, a setuid file with a security.capability xattr, a symlink, a fifo, a char
 *   device; config
 *   with Env, WorkingDir, User app, Entrypoint, Cmd and a label;
 * app2 (on base): a 5 MiB file (larger than a pack frame) and a small one.
 */
export function makeTestImages(dir: string): TestImages {
  const storage = ['--root', join(dir, 'storage'), '--runroot', join(dir, 'run'), '--storage-driver', 'overlay'];
  const b = (...args: string[]): string => run('buildah', [...storage, ...args]).trim();
  const root = join(dir, 'rootfs');
  mkdirSync(join(root, 'bin'), { recursive: true });
  for (const d of ['etc', 'data/keep', 'opq', 'tmp']) mkdirSync(join(root, d), { recursive: true });
  copyFileSync('/bin/busybox', join(root, 'bin/busybox'));
  chmodSync(join(root, 'bin/busybox'), 0o755);
  symlinkSync('busybox', join(root, 'bin/sh'));
  writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/home/app:/bin/sh\n');
  writeFileSync(join(root, 'etc/group'), 'root:x:0:\napp:x:1001:\n');
  writeFileSync(join(root, 'data/gone.txt'), 'to be deleted\n');
  writeFileSync(join(root, 'data/keep/k.txt'), 'kept\n');
  writeFileSync(join(root, 'opq/old.txt'), 'hidden by the opaque dir\n');
  chmodSync(join(root, 'tmp'), 0o1777);
  run('tar', ['-C', root, '--numeric-owner', '-cf', join(dir, 'base.tar'), '.']);
  const names = { base: 'localhost/mstest/base:1', app1: 'localhost/mstest/app1:1', app2: 'localhost/mstest/app2:1' };
  const c0 = b('from', 'scratch');
  b('add', c0, join(dir, 'base.tar'), '/');
  b('commit', '--quiet', c0, names.base);
  b('rm', c0);

  const c1 = b('from', '--pull-never', names.base);
  const m1 = b('mount', c1);
  rmSync(join(m1, 'data/gone.txt'));
  rmSync(join(m1, 'opq'), { recursive: true });
  mkdirSync(join(m1, 'opq'));
  writeFileSync(join(m1, 'opq/new.txt'), 'new\n');
  writeFileSync(join(m1, 'data/a'), 'linked\n');
  linkSync(join(m1, 'data/a'), join(m1, 'data/b'));
  writeFileSync(join(m1, 'data/su'), '#!/bin/sh\necho su\n');
  chmodSync(join(m1, 'data/su'), 0o4755);
  run('setfattr', ['-n', 'security.capability', '-v', '0x0100000200040000000000000000000000000000', join(m1, 'data/su')]);
  symlinkSync('../data/a', join(m1, 'data/link'));
  run('mkfifo', [join(m1, 'data/fifo')]);
  run('mknod', [join(m1, 'data/null'), 'c', '1', '3']);
  b('umount', c1);
  b(
    'config',
    '--env',
    'FOO=bar',
    '--env',
    'PATH=/bin',
    '--workingdir',
    '/data',
    '--user',
    'app',
    '--entrypoint',
    '["/bin/sh","-c"]',
    '--cmd',
    'echo hi',
    '--label',
    'org.test=yes',
    c1,
  );
  b('commit', '--quiet', c1, names.app1);
  b('rm', c1);

  const c2 = b('from', '--pull-never', names.base);
  const m2 = b('mount', c2);
  const big = Buffer.alloc(5 << 20);
  for (let i = 0; i < big.length; i += 4) big.writeUInt32LE((i * 2654435761) >>> 0, i);
  writeFileSync(join(m2, 'data/big.bin'), big);
  writeFileSync(join(m2, 'data/app2.txt'), 'app2\n');
  b('umount', c2);
  b('commit', '--quiet', c2, names.app2);
  b('rm', c2);
  return { storage, ...names, cs: (n) => `containers-storage:[overlay@${join(dir, 'storage')}+${join(dir, 'run')}]${n}` };
}

/** Saves an image as podman does (`podman save --format oci-archive|docker-archive`). */
export function saveImage(img: TestImages, name: string, format: 'oci-archive' | 'docker-archive', file: string): void {
  run('podman', [...img.storage, 'save', '--quiet', '--format', format, '-o', file, name]);
}

/** An OCI layout directory with the image under `tag`, written by skopeo. */
export function copyToOciLayout(img: TestImages, name: string, dir: string, tag: string): void {
  run('skopeo', ['copy', '--quiet', img.cs(name), `oci:${dir}:${tag}`]);
}

/** What umoci makes of the image: the reference tree an import's export must equal. */
export function umociUnpack(layoutDir: string, tag: string, bundle: string): string {
  run('umoci', ['unpack', '--image', `${layoutDir}:${tag}`, bundle]);
  return join(bundle, 'rootfs');
}

/** `podman export` of a container created (not run) from the image, extracted with every attribute. */
export function podmanExport(img: TestImages, name: string, dest: string): string {
  const id = run('podman', [...img.storage, 'create', '--runtime', 'runc', name, '/bin/sh'])
    .trim()
    .split('\n')
    .at(-1)!;
  try {
    mkdirSync(dest, { recursive: true });
    execFileSync('sh', ['-c', `podman ${img.storage.join(' ')} export ${id} | tar -C ${dest} --numeric-owner -xpf - --xattrs --xattrs-include='*'`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  } finally {
    run('podman', [...img.storage, 'rm', id]);
  }
  return dest;
}

export function pushImage(img: TestImages, name: string, dest: string, creds?: string, extra: string[] = []): void {
  run('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', ...(creds === undefined ? [] : ['--dest-creds', creds]), ...extra, img.cs(name), dest]);
}

/**
 * Pushes `image` to `host/repo:member`, then an OCI index `host/repo:tag` holding only that
 * image, annotated with `platform` (a list without the platform an import asks for).
 */
export async function pushManifestList(
  img: TestImages,
  image: string,
  host: string,
  repo: string,
  tag: string,
  platform: { os: string; architecture: string },
): Promise<void> {
  pushImage(img, image, `docker://${host}/${repo}:member`);
  const res = await fetch(`http://${host}/v2/${repo}/manifests/member`, {
    headers: { accept: 'application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' },
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  const mediaType = res.headers.get('content-type') ?? 'application/vnd.oci.image.manifest.v1+json';
  const index = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [{ mediaType, digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}`, size: bytes.length, platform }],
  };
  const put = await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/vnd.oci.image.index.v1+json' },
    body: JSON.stringify(index),
  });
  if (!put.ok) throw new Error(`pushing the index: HTTP ${put.status} ${await put.text()}`);
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = netServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

export interface RunningRegistry {
  host: string;
  stop(): Promise<void>;
}

/** The distribution registry on 127.0.0.1, storing in `dir`; with htpasswd auth when given `user:password`. */
export async function startRegistry(dir: string, htpasswd?: { user: string; password: string }): Promise<RunningRegistry> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  let auth = '';
  if (htpasswd !== undefined) {
    const file = join(dir, 'htpasswd');
    writeFileSync(file, run('htpasswd', ['-Bbn', htpasswd.user, htpasswd.password]));
    auth = `auth:\n  htpasswd:\n    realm: test\n    path: ${file}\n`;
  }
  const config = join(dir, 'config.yml');
  writeFileSync(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ` +
      `${join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n${auth}`,
  );
  const child: ChildProcess = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const host = `127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const ok = await fetch(`http://${host}/v2/`).then(
      () => true,
      () => false,
    );
    if (ok) break;
    if (child.exitCode !== null || i > 200) throw new Error(`docker-registry did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    host,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

export interface Faults {
  /** Blob digests whose body gets one byte flipped. */
  flip?: Set<string>;
  /** Blob digests whose body is cut (connection destroyed) after `after` bytes, the next `times` requests. */
  cutAfter?: Map<string, { after: number; times: number }>;
}

export interface TokenFront {
  host: string;
  faults: Faults;
  /** Requests seen, `METHOD path`. */
  log: string[];
  stop(): Promise<void>;
}

/**
 * A bearer-token front for a registry: `/v2/...` without a valid token gets the 401 challenge
 * (realm on this server, service, scope), `/token` hands out a token for good Basic credentials,
 * the rest is proxied; faults are applied to blob bodies.
 */
export async function startTokenFront(upstream: string, creds: { user: string; password: string }): Promise<TokenFront> {
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const token = `tok-${Math.random().toString(36).slice(2)}`;
  const faults: Faults = {};
  const log: string[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', `http://${host}`);
    log.push(`${req.method} ${url.pathname}`);
    if (url.pathname === '/token') {
      const want = `Basic ${Buffer.from(`${creds.user}:${creds.password}`).toString('base64')}`;
      if (req.headers.authorization !== want) {
        res.writeHead(401).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token, expires_in: 300 }));
      return;
    }
    if (req.headers.authorization !== `Bearer ${token}`) {
      const repo = /^\/v2\/(.+)\/(?:manifests|blobs)\//.exec(url.pathname)?.[1] ?? '';
      res.writeHead(401, {
        'www-authenticate': `Bearer realm="http://${host}/token",service="test-registry",scope="repository:${repo}:pull"`,
        'content-type': 'application/json',
      });
      res.end('{"errors":[{"code":"UNAUTHORIZED"}]}');
      return;
    }
    const headers = { ...req.headers };
    delete headers.authorization;
    headers.host = upstream;
    const blob = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(url.pathname)?.[1];
    const up = request({ host: upstream.split(':')[0], port: Number(upstream.split(':')[1]), method: req.method, path: req.url, headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      const c = blob === undefined ? undefined : faults.cutAfter?.get(blob);
      const cut = c !== undefined && c.times > 0 ? c.after : undefined;
      if (c !== undefined && c.times > 0) c.times--;
      const flip = blob !== undefined && faults.flip?.has(blob) === true;
      let sent = 0;
      let flipped = false;
      ur.on('data', (c: Buffer) => {
        let chunk = c;
        if (flip && !flipped && chunk.length > 0) {
          chunk = Buffer.from(chunk);
          const at = Math.min(100, chunk.length - 1);
          chunk[at] = chunk[at]! ^ 0xff;
          flipped = true;
        }
        if (cut !== undefined && sent + chunk.length > cut) {
          res.write(chunk.subarray(0, Math.max(0, cut - sent)));
          ur.destroy();
          res.destroy();
          return;
        }
        sent += chunk.length;
        res.write(chunk);
      });
      ur.on('end', () => res.end());
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    host,
    faults,
    log,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Removes a test directory, unmounting first what container storage mounted inside it. */
export function removeWorkDir(dir: string): void {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((m): m is string => m !== undefined && (m === dir || m.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  rmSync(dir, { recursive: true, force: true });
}
