/**
 * One S3 server on loopback with the fault proxy in front, for a whole test file: started before
 * its tests, stopped after; registries handed to `track` are closed and the fault plan cleared
 * after each test.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { type FaultyProxy, startFaultyProxy } from './faulty-proxy.js';
import { type S3TestServer, startS3Server } from './server.js';

export interface ProxiedS3 {
  readonly server: S3TestServer;
  readonly proxy: FaultyProxy;
  /** A temporary directory, removed with the server. */
  readonly scratch: string;
  track(...registries: Array<{ close(): void }>): void;
}

export function useProxiedS3(scratchPrefix: string): ProxiedS3 {
  let server: S3TestServer | undefined;
  let proxy: FaultyProxy | undefined;
  let scratch: string | undefined;
  const open: Array<{ close(): void }> = [];
  beforeAll(async () => {
    server = await startS3Server();
    proxy = await startFaultyProxy(server.endpoint);
    scratch = await mkdtemp(join(tmpdir(), scratchPrefix));
  });
  afterAll(async () => {
    await proxy?.stop();
    await server?.stop();
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
  });
  afterEach(() => {
    for (const r of open.splice(0)) r.close();
    proxy?.setPlan({});
  });
  const started = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`${what} is not started: use it inside a test`);
    return v;
  };
  return {
    get server() {
      return started(server, 'the S3 server');
    },
    get proxy() {
      return started(proxy, 'the fault proxy');
    },
    get scratch() {
      return started(scratch, 'the scratch dir');
    },
    track: (...registries) => void open.push(...registries),
  };
}
