/**
 * A snapshot pushed to the registry ({"push": true}) is an environment like any other: the
 * parent's layers plus the snapshot's, under `snapshots/<id>` or the given tag, so another node
 * (here: a second, empty store) pulls and opens it by ref.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { openSandbox } from '../runtime/open.js';
import { StorePaths } from '../store/paths.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

describe('a pushed snapshot', () => {
  it('is pulled into a second store and opened there, with the default tag and a given one', async () => {
    const id = await kit.create();
    await kit.sh(id, 'mkdir -p /work && echo from-node-a > /work/state && rm /data/gone.txt');
    const r = await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, { push: true });
    expect(r.status, r.text).toBe(201);
    const snap = r.json();
    expect(snap.ref).toBe(`snapshots/${snap.snapshot as string}`);
    const tagged = (await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, { push: true, tag: 'team/after-setup-v1' })).json();
    expect(tagged.ref).toBe('team/after-setup-v1');

    const parent = await resolveEnv(kit.reg, 'kit/busybox');
    const env = await resolveEnv(kit.reg, snap.ref as string);
    expect(env.config.layers.map((l) => l.digest)).toEqual([...parent.config.layers.map((l) => l.digest), snap.layer]);
    expect(env.config.config).toEqual(parent.config.config);

    const otherRoot = join(kit.work, 'node-b');
    mkdirSync(otherRoot, { mode: 0o755 });
    const other = new StorePaths(join(otherRoot, 'store'));
    for (const ref of [snap.ref as string, 'team/after-setup-v1']) {
      const sb = await openSandbox(kit.reg, other, ref);
      try {
        expect((await sb.exec(['/bin/sh', '-c', 'cat /work/state; ls /data; echo $GREETING'])).stdout).toBe('from-node-a\nkeep.txt\nhello\n');
      } finally {
        await sb.destroy();
      }
    }
    expect((await kit.call('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
  });
});
