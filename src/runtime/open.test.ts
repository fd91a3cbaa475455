import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { gcStore } from '../store/gc.js';
import { forkLeased, openSandbox } from './open.js';

const { reg, store } = publishedBusybox('ms-runtime-', 'rt/busybox', { env: { GREETING: 'hello' }, workdir: '/root' });

describe('a sandbox opened from a ref', () => {
  it('runs over the pulled layers with the environment config, leases them while alive, and leaves nothing after destroy', async () => {
    const sb = await openSandbox(reg, store, 'rt/busybox');
    try {
      const o = await sb.exec(['/bin/sh', '-c', 'echo "$GREETING from $(pwd)"; id -u']);
      expect(o.stdout).toBe('hello from /root\n0\n');
      expect(readdirSync(store.leasesDir)).toEqual([`${sb.id}.json`]);
      // a store gc with no ref left and no grace must not touch a leased layer
      rmSync(store.ref('rt/busybox'));
      const gc = await gcStore(store, { graceMs: 0, dryRun: false });
      expect(gc.removedLayers).toEqual([]);
      expect((await sb.exec(['/bin/busybox', 'true'])).exitCode).toBe(0);

      expect((await sb.exec(['/bin/sh', '-c', 'echo parent > /root/mark'])).exitCode).toBe(0);
      const branches = await forkLeased(store, sb, 2);
      expect(readdirSync(store.leasesDir)).toHaveLength(3);
      // the shared fork: both branches over one frozen copy of the parent's writes, on top of its layers
      const frozen = branches.map((b) => b.state.lowerDirs.at(-1));
      for (const b of branches) {
        expect(b.state.lowerDirs).toEqual([...sb.state.lowerDirs, frozen[0]]);
        expect(b.origin).toEqual(sb.origin);
        expect((await b.exec(['cat', '/root/mark'])).stdout).toBe('parent\n');
      }
      await Promise.all(branches.map((b) => b.destroy()));
    } finally {
      await sb.destroy();
    }
    expect(readdirSync(store.leasesDir)).toEqual([]);
    expect(existsSync(join(store.sandboxesDir, sb.id))).toBe(false);
  });

  it('is destroyed when an `await using` block is left, and an aborted open rejects with ABORTED leaving no sandbox', async () => {
    let id = '';
    {
      await using sb = await openSandbox(reg, store, 'rt/busybox');
      id = sb.id;
      expect(existsSync(join(store.sandboxesDir, id))).toBe(true);
    }
    expect(existsSync(join(store.sandboxesDir, id))).toBe(false);
    const abort = new AbortController();
    abort.abort(new Error('the trainer moved on'));
    await expect(openSandbox(reg, store, 'rt/busybox', { signal: abort.signal })).rejects.toMatchObject({ code: 'ABORTED' });
    expect(readdirSync(store.sandboxesDir)).toEqual([]);
    expect(readdirSync(store.leasesDir)).toEqual([]);
  });

  it('kills a command when its signal fires: exec and session run end as killed, and the sandbox goes on', async () => {
    await using sb = await openSandbox(reg, store, 'rt/busybox');
    const abort = new AbortController();
    const running = sb.exec(['/bin/sh', '-c', 'echo started; exec sleep 600'], { signal: abort.signal });
    // whether the signal fires before the command starts or while it runs, it ends killed
    const session = sb.run('echo ready; sleep 600', { signal: AbortSignal.timeout(1000) });
    setTimeout(() => abort.abort(), 200);
    expect(await running).toMatchObject({ status: 'killed' });
    expect(await session).toMatchObject({ status: 'killed' });
    expect((await sb.exec(['/bin/busybox', 'true'])).exitCode).toBe(0);
    expect((await sb.run('echo still')).stdout).toBe('still\n');
  });
});
