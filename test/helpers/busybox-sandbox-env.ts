/**
 * The busybox sandbox test files' shared setup (vitest hooks): kept apart from sandbox-testkit.ts,
 * which the benchmarks import too and which therefore must not load vitest.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll } from 'vitest';
import type { HostInfo } from '../../src/sandbox/host.js';
import { createSandbox, type CreateHooks, type Sandbox, type SandboxOptions } from '../../src/sandbox/sandbox.js';
import { busyboxLower, freshStateDir, hostInfo } from './sandbox-testkit.js';

/** What a sandbox test file works with: the host, a shifted busybox lower and a state dir of its own. */
export interface BusyboxSandboxEnv {
  readonly host: HostInfo;
  readonly lower: string;
  readonly stateDir: string;
  /** A sandbox over the busybox lower in the state dir, with `opts` and `hooks` on top. */
  create(opts?: Partial<SandboxOptions>, hooks?: CreateHooks): Promise<Sandbox>;
}

/**
 * The setup every busybox sandbox test file shares: registers a beforeAll that probes the host,
 * makes (or finds cached) the shifted busybox lower and a fresh state dir, and an afterAll that
 * removes the state dir. Call it at the top of the file; the fields can be read once beforeAll
 * has run (a file's own hooks registered after it run after its beforeAll and before its afterAll).
 */
export function busyboxSandboxEnv(): BusyboxSandboxEnv {
  let ready: { host: HostInfo; lower: string; stateDir: string } | undefined;
  beforeAll(async () => {
    const host = await hostInfo();
    ready = { host, lower: await busyboxLower(host.idMap), stateDir: await freshStateDir() };
  }, 300_000);
  afterAll(async () => {
    if (ready !== undefined) await rm(ready.stateDir, { recursive: true, force: true });
  });
  const get = () => {
    if (ready === undefined) throw new Error('busyboxSandboxEnv: read before its beforeAll ran (read it inside a hook or test)');
    return ready;
  };
  return {
    get host() {
      return get().host;
    },
    get lower() {
      return get().lower;
    },
    get stateDir() {
      return get().stateDir;
    },
    create: (opts = {}, hooks = {}) => createSandbox({ lowerDirs: [get().lower], stateDir: get().stateDir, ...opts }, { host: get().host, ...hooks }),
  };
}
