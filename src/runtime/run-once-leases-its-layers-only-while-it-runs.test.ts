/**
 * runOnce from a ref: pulled, run with the environment's config, its layers leased while the
 * command runs (a store gc then leaves them alone) and released with the sandbox after.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { gcStore } from '../store/gc.js';
import { runOnce } from './index.js';

const { reg, store } = publishedBusybox('ms-runtime-once-', 'rt/busybox', { env: { GREETING: 'hello' }, workdir: '/root' });

describe('runOnce from a ref', () => {
  it("runs with the environment's config over leased layers, and leaves no lease or sandbox after", async () => {
    let id = '';
    let leases: string[] = [];
    const o = await runOnce(reg, store, 'rt/busybox', ['/bin/sh', '-c', 'echo "$GREETING $EXTRA from $(pwd)"'], {
      env: { EXTRA: 'there' },
      onStart: (sandboxId) => {
        id = sandboxId;
        leases = readdirSync(store.leasesDir);
      },
    });
    expect(o).toMatchObject({ status: 'ok', exitCode: 0, stdout: 'hello there from /root\n' });
    expect(leases).toEqual([`${id}.json`]);
    expect(readdirSync(store.leasesDir)).toEqual([]);
    expect(existsSync(join(store.sandboxesDir, id))).toBe(false);
  });

  it('a store gc while the command runs spares its layers; its signal kills the command', async () => {
    const abort = new AbortController();
    let gc: ReturnType<typeof gcStore> | undefined;
    const o = await runOnce(reg, store, 'rt/busybox', ['/bin/sh', '-c', 'sleep 600'], {
      signal: abort.signal,
      onStart: () => {
        // no ref left and no grace: only the lease keeps the layers
        rmSync(store.ref('rt/busybox'));
        gc = gcStore(store, { graceMs: 0, dryRun: false });
        void gc.finally(() => abort.abort());
      },
    });
    expect(o).toMatchObject({ status: 'killed', signal: 'SIGKILL' });
    expect((await gc!).removedLayers).toEqual([]);
    // with the run over, nothing holds them
    expect((await gcStore(store, { graceMs: 0, dryRun: false })).removedLayers.length).toBeGreaterThan(0);
  });
});
