/**
 * A real sandbox server for tests that need an environment with files to delete and a dir to make
 * opaque (snapshot, reset, fork): the ServerFixture's server and HTTP helper, over `kit/busybox`,
 * plus `sh` for a command's stdout. Each test file gets its own (one busybox push and one listen).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LocalRegistry } from '../../src/registry/local.js';
import type { RunningServer } from '../../src/server/serve.js';
import type { StorePaths } from '../../src/store/paths.js';
import { type Res, ServerFixture } from './server-fixture.js';

export type { Res };

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
  const fx = new ServerFixture();
  await fx.pushBusybox(fx.reg, 'kit/busybox', {}, (root) => {
    mkdirSync(join(root, 'data'));
    mkdirSync(join(root, 'opq'));
    for (const [p, t] of [
      ['data/keep.txt', 'keep\n'],
      ['data/gone.txt', 'gone\n'],
      ['opq/a.txt', 'a\n'],
      ['opq/b.txt', 'b\n'],
    ] as const)
      writeFileSync(join(root, p), t);
  });
  fx.srv = await fx.serve({ maxSandboxes: 32 });
  fx.token = readFileSync(join(fx.work, 'token'), 'utf8').trim();
  const call = (method: string, path: string, body?: unknown): Promise<Res> => fx.call(method, path, body);
  return {
    work: fx.work,
    reg: fx.reg,
    store: fx.store,
    srv: fx.srv,
    call,
    create: (body = {}) => fx.create('snapshot' in body || 'ref' in body ? body : { ref: 'kit/busybox', ...body }),
    sh: async (id, command) => {
      const r = await call('POST', `/v1/sandboxes/${id}/exec`, { command });
      if (r.status !== 200) throw new Error(`exec: ${r.status} ${r.text}`);
      return r.json().stdout as string;
    },
    close: () => fx.tearDown(),
  };
}
