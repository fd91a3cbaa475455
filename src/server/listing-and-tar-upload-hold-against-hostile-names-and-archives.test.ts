/**
 * Hostile input to the directory routes: a file name may hold newlines, and one can be made to look
 * like a line of the listing's own stat output; the listing reports each name as it is and forges
 * no entry. A tar upload is all or nothing: an archive whose last entry is refused (or that breaks
 * off) writes none of the entries before it, nor the target directory.
 */
import { tarOf } from '../../test/helpers/oci-layout.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerFixture } from '../../test/helpers/server-fixture.js';

const fx = new ServerFixture();
beforeAll(() => fx.setUp(), 120_000);
afterAll(() => fx.tearDown());

async function sh(id: string, command: string): Promise<string> {
  const r = (await fx.call('POST', `/v1/sandboxes/${id}/exec`, { command })).json();
  expect(r, command).toMatchObject({ exit_code: 0 });
  return r.stdout as string;
}

const TAR = { 'content-type': 'application/x-tar' };

describe('hostile names and archives', () => {
  it('lists names holding newlines, and names that look like stat lines, as they are, forging nothing', async () => {
    const id = await fx.create();
    // a name that, split at its newline, reads as stat's `%f %s %n` line of a 4242-byte 0755 file
    const forged = 'evil\n81ed 4242 forged';
    const trailing = 'trailing\n';
    const link = 'ln\nk';
    await sh(
      id,
      `mkdir -p /work/d && cd /work/d && printf 123 > '${forged}' && touch '${trailing}' 'plain' && ` +
        `mkdir '${'dir\n41ed 1 x'}' && ln -s '${'/tar\nget'}' '${link}'`,
    );
    const r = await fx.call('GET', `/v1/sandboxes/${id}/files/list?path=/work/d`);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({
      path: '/work/d',
      entries: [
        { name: 'dir\n41ed 1 x', type: 'dir', size: expect.any(Number), mode: '755' },
        { name: forged, type: 'file', size: 3, mode: '644' },
        { name: link, type: 'symlink', size: '/tar\nget'.length, mode: '777', target: '/tar\nget' },
        { name: 'plain', type: 'file', size: 0, mode: '644' },
        { name: trailing, type: 'file', size: 0, mode: '644' },
      ],
    });
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });

  it('writes nothing from a tar whose last entry is refused, or that breaks off', async () => {
    const id = await fx.create();
    await sh(id, 'mkdir -p /work/target');
    const good = [
      { name: 'ok1.txt', data: 'one' },
      { name: 'dir/', type: 'directory' as const },
      { name: 'dir/ok2.txt', data: 'two'.repeat(4000) },
    ];
    for (const [why, last] of [
      ['../', { name: '../escape.txt', data: 'x' }],
      ['absolute', { name: '/work/escape.txt', data: 'x' }],
      ['device', { name: 'dev', type: 'character-device' as const, devmajor: 1, devminor: 3 }],
    ] as const) {
      for (const path of ['/work/target', '/work/fresh']) {
        const r = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=${path}`, undefined, { raw: await tarOf([...good, last]), headers: TAR });
        expect([why, r.status, r.json()]).toMatchObject([why, 422, { error: { code: 'UNSAFE_PATH' } }]);
      }
    }
    // cut off inside the last file's data
    const whole = await tarOf(good);
    const cut = whole.subarray(0, 512 * 4 + 1000);
    const r = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/target`, undefined, { raw: cut, headers: TAR });
    expect([r.status, r.json()]).toMatchObject([422, { error: { code: 'INVALID_INPUT' } }]);
    expect(await sh(id, 'ls -A /work; ls -A /work/target; find / -xdev -name escape.txt -o -xdev -name "ok*.txt"')).toBe('target\n');
    // and the same archive without its hostile end goes in whole
    const ok = await fx.call('PUT', `/v1/sandboxes/${id}/tar?path=/work/target`, undefined, { raw: whole, headers: TAR });
    expect(ok.status, ok.text).toBe(204);
    expect(await sh(id, 'cd /work/target && cat ok1.txt && wc -c < dir/ok2.txt')).toBe('one12000\n');
    await fx.call('DELETE', `/v1/sandboxes/${id}`);
  });
});
