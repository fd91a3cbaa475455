/**
 * A real sandbox server for tests: 127.0.0.1 on a random port, over a temporary registry (with a
 * busybox environment `kit/busybox` holding a few extra dirs) and store, plus a fetch helper that
 * sends the token. Each test file gets its own (cheap: one busybox push and one listen).
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { populateBusyboxRoot } from '../../src/recipe/base-rootfs.js';
import { pushTree } from '../../src/publish/push.js';
import { LocalRegistry } from '../../src/registry/local.js';
import { type RunningServer, startServer } from '../../src/server/serve.js';
import { StorePaths } from '../../src/store/paths.js';

export interface Res {
  status: number;
  text: string;
  json: () => Record<string, unknown>;
}

export interface ServerKit {
  work: string;
  reg: LocalRegistry;
  store: StorePaths;
  srv: RunningServer;
  call(method: string, path: string, body?: unknown): Promise<Res>;
  /** Creates a sandbox of `kit/busybox` (or of the body's source) and returns its id. */
  create(body?: Record<string, unknown>): Promise<string>;
  /** Runs a shell command with exec and returns its stdout (throws on a failed request). */
  sh(id: string, command: string): Promise<string>;
  close(): Promise<void>;
}

/**
 * The environment: busybox plus `/data/{keep,gone}.txt` and `/opq/{a,b}.txt` (for whiteouts and
 * opaque dirs), env GREETING=hello, workdir /root.
 */
export async function startServerKit(): Promise<ServerKit> {
  const work = mkdtempSync(join(tmpdir(), 'ms-kit-'));
  chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
  const reg = new LocalRegistry(join(work, 'registry'));
  const store = new StorePaths(join(work, 'store'));
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  mkdirSync(join(root, 'data'));
  mkdirSync(join(root, 'opq'));
  for (const [p, t] of [
    ['data/keep.txt', 'keep\n'],
    ['data/gone.txt', 'gone\n'],
    ['opq/a.txt', 'a\n'],
    ['opq/b.txt', 'b\n'],
  ] as const)
    writeFileSync(join(root, p), t);
  await pushTree(reg, new StorePaths(join(work, 'push')), root, { tag: 'kit/busybox', config: { env: { GREETING: 'hello' }, workdir: '/root' } });
  const srv = await startServer(
    reg,
    store,
    { listen: { host: '127.0.0.1', port: 0 }, tokenFile: join(work, 'token'), maxSandboxes: 32, idleTimeoutMs: 600_000, ttlMs: 3_600_000 },
    () => undefined,
  );
  const token = readFileSync(join(work, 'token'), 'utf8').trim();
  const call = async (method: string, path: string, body?: unknown): Promise<Res> => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${srv.url}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    const text = await r.text();
    return { status: r.status, text, json: () => JSON.parse(text) as Record<string, unknown> };
  };
  const kit: ServerKit = {
    work,
    reg,
    store,
    srv,
    call,
    create: async (body = {}) => {
      const r = await call('POST', '/v1/sandboxes', 'snapshot' in body || 'ref' in body ? body : { ref: 'kit/busybox', ...body });
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
      return r.json().id as string;
    },
    sh: async (id, command) => {
      const r = await call('POST', `/v1/sandboxes/${id}/exec`, { command });
      if (r.status !== 200) throw new Error(`exec: ${r.status} ${r.text}`);
      return r.json().stdout as string;
    },
    close: async () => {
      await srv.close();
      rmSync(work, { recursive: true, force: true });
    },
  };
  return kit;
}
