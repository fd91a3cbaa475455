/**
 * DELETE /v1/snapshots/:snap while a sandbox runs over it is refused (409 SNAPSHOT_IN_USE), so no
 * layer a live sandbox mounts is removed; once the sandboxes are gone (or reset away from it) the
 * delete goes through.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';

const kit = new ServerKit();
beforeAll(() => kit.setUp(), 120_000);
afterAll(() => kit.tearDown());

describe('deleting a snapshot in use', () => {
  it('is refused while a sandbox (or a fork of it, or one reset to it) uses it, and done after', async () => {
    const src = await kit.create();
    await kit.sh(src, 'echo kept > /root/kept');
    const snap = (await kit.call('POST', `/v1/sandboxes/${src}/snapshot`, {})).json().snapshot as string;
    // the source sandbox itself does not run over the snapshot's layer
    const user = await kit.create({ snapshot: snap });
    const refused = await kit.call('DELETE', `/v1/snapshots/${snap}`);
    expect([refused.status, refused.json()]).toMatchObject([409, { error: { code: 'SNAPSHOT_IN_USE' } }]);
    expect(refused.json().error).toMatchObject({ message: expect.stringContaining(user) });

    const children = (await kit.call('POST', `/v1/sandboxes/${user}/fork`, { count: 1 })).json().children as Array<{ id: string }>;
    expect((await kit.call('DELETE', `/v1/sandboxes/${user}`)).status).toBe(204);
    expect((await kit.call('DELETE', `/v1/snapshots/${snap}`)).status).toBe(409);
    expect(await kit.sh(children[0]!.id, 'cat /root/kept')).toBe('kept\n');
    expect((await kit.call('DELETE', `/v1/sandboxes/${children[0]!.id}`)).status).toBe(204);

    await kit.call('POST', `/v1/sandboxes/${src}/reset`, { snapshot: snap });
    expect((await kit.call('DELETE', `/v1/snapshots/${snap}`)).status).toBe(409);
    await kit.call('POST', `/v1/sandboxes/${src}/reset`, {});
    expect((await kit.call('DELETE', `/v1/snapshots/${snap}`)).status).toBe(204);
    expect((await kit.call('GET', '/v1/snapshots')).json().snapshots).toEqual([]);
    expect((await kit.call('DELETE', `/v1/snapshots/${snap}`)).status).toBe(404);
    expect((await kit.call('DELETE', `/v1/sandboxes/${src}`)).status).toBe(204);
  });
});
