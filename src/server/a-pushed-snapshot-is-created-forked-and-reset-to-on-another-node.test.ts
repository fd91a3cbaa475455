/**
 * State that moves between nodes, over HTTP: a snapshot node A pushes to the shared registry is,
 * on node B (another server over another store), the source of a create, of a fork of that
 * sandbox, and of a reset of a sandbox B already held (`{"ref": R}`), which a plain reset undoes.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';
import { StorePaths } from '../store/paths.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

const STATE = 'cat /work/state; ls /data | tr "\\n" " "';

describe('a pushed snapshot on another node', () => {
  it('is created from, forked and reset to there by ref', async () => {
    const a = kit.srv;
    const rootB = join(kit.work, 'node-b');
    mkdirSync(rootB, { mode: 0o755 });
    const b = await kit.serve({ store: new StorePaths(join(rootB, 'store')), maxSandboxes: 8, more: { nodeName: 'node-b' } });
    const onB = (method: string, path: string, body?: unknown) => kit.call(method, path, body, { server: b });
    const shB = async (id: string, command: string): Promise<string> => {
      const r = await onB('POST', `/v1/sandboxes/${id}/exec`, { command });
      expect(r.json(), r.text).toMatchObject({ outcome: 'ok' });
      return r.json().stdout as string;
    };

    const src = await kit.create({}, a);
    await kit.sh(src, 'mkdir -p /work && echo from-a > /work/state && rm /data/gone.txt');
    const snap = await kit.call('POST', `/v1/sandboxes/${src}/snapshot`, { push: true, tag: 'moved/after-setup' });
    expect(snap.status, snap.text).toBe(201);

    const made = await onB('POST', '/v1/sandboxes', { ref: 'moved/after-setup' });
    expect(made.status, made.text).toBe(201);
    const id = made.json().id as string;
    expect(id).toMatch(/\.node-b$/);
    expect(await shB(id, STATE)).toBe('from-a\nkeep.txt ');
    const children = (await onB('POST', `/v1/sandboxes/${id}/fork`, { count: 1 })).json().children as Array<{ id: string }>;
    expect(await shB(children[0]!.id, STATE)).toBe('from-a\nkeep.txt ');

    // a sandbox of the base environment, reset onto the moved state, then back to its own
    const plain = (await onB('POST', '/v1/sandboxes', { ref: 'kit/busybox' })).json().id as string;
    await shB(plain, 'echo mine > /root/mine');
    const reset = await onB('POST', `/v1/sandboxes/${plain}/reset`, { ref: 'moved/after-setup' });
    expect(reset.status, reset.text).toBe(200);
    expect(reset.json()).toMatchObject({ id: plain, ref: 'moved/after-setup' });
    expect(await shB(plain, `${STATE}; ls /root`)).toBe('from-a\nkeep.txt ');
    const back = await onB('POST', `/v1/sandboxes/${plain}/reset`, {});
    expect(back.json()).toMatchObject({ id: plain, ref: 'kit/busybox' });
    expect(await shB(plain, 'ls /data | tr "\\n" " "; test -e /work/state || echo no-state')).toBe('gone.txt keep.txt no-state\n');

    for (const [body, status, code] of [
      [{ ref: 'moved/no-such' }, 404, 'NOT_FOUND'],
      [{ ref: '../x' }, 422, 'INVALID_INPUT'],
      [{ ref: 'moved/after-setup', snapshot: 'snap-0000000000000000' }, 422, 'INVALID_INPUT'],
    ] as const) {
      const r = await onB('POST', `/v1/sandboxes/${plain}/reset`, body);
      expect([body, r.status, r.json()]).toMatchObject([body, status, { error: { code } }]);
    }
    // a failed reset leaves the sandbox as it was
    expect(await shB(plain, 'ls /data | tr "\\n" " "')).toBe('gone.txt keep.txt ');
  });
});
