/**
 * POST /v1/sandboxes/:id/snapshot freezes what a running sandbox wrote (a new file, a deleted
 * lower file, a dir replaced whole) into a layer of the usual format; a sandbox created from the
 * snapshot sees exactly that tree, and the snapshot outlives store gc while it exists.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { ServerKit } from '../../test/helpers/server-kit.js';
import { digestHex } from '../cas/digest.js';
import { gcStore } from '../store/gc.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const TREE = 'for d in /data /opq; do echo "$d: $(ls $d | tr "\\n" " ")"; done; cat /data/new.txt /opq/c.txt';

describe('snapshot', () => {
  it('captures a written file, a whiteout and an opaque dir; a sandbox from it sees exactly that', async () => {
    const id = await kit.create();
    // a process keeps writing while the snapshot is taken: the capture stops it meanwhile
    await kit.sh(id, 'echo new > /data/new.txt && rm /data/gone.txt && rm -rf /opq && mkdir /opq && echo c > /opq/c.txt');
    const ses = (await kit.call('POST', `/v1/sandboxes/${id}/sessions`, {})).json().session as string;
    await kit.call('POST', `/v1/sandboxes/${id}/sessions/${ses}/run`, {
      command: '(i=0; while :; do i=$((i+1)); echo $i > /root/t.tmp; mv /root/t.tmp /root/ticker; done) >/dev/null 2>&1 &',
    });
    const before = await kit.sh(id, TREE);
    expect(before).toBe('/data: keep.txt new.txt \n/opq: c.txt \nnew\nc\n');

    const r = await kit.call('POST', `/v1/sandboxes/${id}/snapshot`, {});
    expect(r.status, r.text).toBe(201);
    const snap = r.json();
    expect(snap).toMatchObject({ snapshot: expect.stringMatching(/^snap-[0-9a-f]{16}$/), layer: expect.stringMatching(/^sha256:/), parent_ref: 'kit/busybox' });
    expect(snap.ref).toBeUndefined();
    // the layer's manifest records the deletion and the opaque dir, as any captured upper does
    const manifest = readFileSync(kit.store.manifest(snap.layer as `sha256:${string}`), 'utf8');
    expect(manifest).toMatch(/"path":"data\/gone.txt"[^\n]*"type":"whiteout"|"type":"whiteout"[^\n]*"path":"data\/gone.txt"/);
    expect(manifest).toMatch(/"opaque":true[^\n]*"path":"opq"|"path":"opq"[^\n]*"opaque":true/);
    expect(manifest).toContain('"path":"data/new.txt"');
    // the sandbox runs on after the snapshot (its processes were continued)
    const t1 = await kit.sh(id, 'cat /root/ticker');
    await eventually(async () => (await kit.sh(id, 'cat /root/ticker')) !== t1);

    expect((await kit.call('GET', '/v1/snapshots')).json().snapshots).toEqual([expect.objectContaining({ snapshot: snap.snapshot, layer: snap.layer })]);
    // the store's gc keeps it: its store ref reaches its layers
    const layerDir = `${kit.store.layersDir}/${digestHex(snap.layer as `sha256:${string}`)}`;
    expect(existsSync(layerDir)).toBe(true);
    const gc = await gcStore(kit.store, { graceMs: 0, dryRun: false });
    expect(gc.removedLayers).not.toContain(digestHex(snap.layer as `sha256:${string}`));
    expect(existsSync(`${layerDir}/data/new.txt`)).toBe(true);

    const child = await kit.create({ snapshot: snap.snapshot });
    expect(await kit.sh(child, TREE)).toBe(before);
    expect(await kit.sh(child, 'echo "$GREETING $(pwd)"')).toBe('hello /root\n');
    const info = (await kit.call('GET', `/v1/sandboxes/${child}`)).json();
    expect(info).toMatchObject({ id: child, ref: 'kit/busybox', snapshot: snap.snapshot });
    // the new sandbox's writes are its own
    await kit.sh(child, 'echo mine > /data/new.txt');
    expect(await kit.sh(id, 'cat /data/new.txt')).toBe('new\n');

    for (const s of [id, child]) expect((await kit.call('DELETE', `/v1/sandboxes/${s}`)).status).toBe(204);
    expect((await kit.call('DELETE', `/v1/snapshots/${snap.snapshot}`)).status).toBe(204);
    expect((await kit.call('GET', '/v1/snapshots')).json().snapshots).toEqual([]);
    expect((await kit.call('POST', '/v1/sandboxes', { snapshot: snap.snapshot })).status).toBe(404);
    // its laid-out layer is gone with it
    expect(existsSync(layerDir)).toBe(false);
  });

  it('a create needs exactly one source', async () => {
    for (const body of [{}, { ref: 'kit/busybox', snapshot: 'snap-0123456789abcdef' }]) {
      const r = await kit.call('POST', '/v1/sandboxes', body);
      expect([r.status, r.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT', field: 'ref' } }]);
    }
    expect((await kit.call('POST', '/v1/sandboxes', { snapshot: 'snap-0123456789abcdef' })).status).toBe(404);
  });
});
