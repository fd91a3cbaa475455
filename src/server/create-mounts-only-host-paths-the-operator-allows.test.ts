/**
 * A create's `mounts`, tried as a hostile tenant: with no `--allow-mount` nothing is mounted; with
 * allowed dirs, only real paths beneath them (not `..`, not a symlink planted in an allowed dir by
 * another tenant's rw mount, not a path whose existence would tell about the host), read-only
 * unless the dir was allowed rw; every refusal in the server's error shape; nothing left after
 * the sandbox is deleted.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerKit } from '../../test/helpers/server-kit.js';
import type { RunningServer } from './serve.js';
import { startServer } from './serve.js';

const kit = new ServerKit();
const host = mkdtempSync(join(tmpdir(), 'msb-allowed-'));
const ro = join(host, 'datasets');
const rw = join(host, 'scratch');
let allowing: RunningServer;

beforeAll(async () => {
  await kit.setUp();
  for (const d of [ro, rw]) mkdirSync(d);
  writeFileSync(join(ro, 'rows.jsonl'), '{"id":1}\n');
  allowing = await kit.serve({ allowMounts: [ro, `${rw}:rw`] });
}, 120_000);
afterAll(async () => {
  await kit.tearDown();
  rmSync(host, { recursive: true, force: true });
});

const create = (body: Record<string, unknown>, server = allowing) => kit.call('POST', '/v1/sandboxes', { ref: 'kit/busybox', ...body }, { server });
/** A command's stdout in a sandbox of the allowing server (it must end 0). */
async function sh(id: string, command: string): Promise<string> {
  const r = await kit.call('POST', `/v1/sandboxes/${id}/exec`, { command }, { server: allowing });
  expect([r.status, r.json().exit_code], r.text).toEqual([200, 0]);
  return r.json().stdout as string;
}
const errorOf = (r: { json: () => Record<string, unknown> }) => (r.json() as { error: { code: string; message: string; hint?: string } }).error;
const hostMounts = (): string[] =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(host));

describe('create with mounts', () => {
  it('mounts nothing on a server that allows no host paths, saying how an operator allows them', async () => {
    const r = await create({ mounts: [{ source: ro, target: '/data' }] }, kit.srv);
    expect(r.status).toBe(403);
    expect(errorOf(r)).toMatchObject({ code: 'MOUNT_NOT_ALLOWED', hint: expect.stringMatching(/--allow-mount/) });
  });

  it('refuses sources outside the allowed dirs however they are spelt, and rw under a read-only dir', async () => {
    // another tenant's rw mount plants a symlink to the host's /etc in the rw dir
    const planter = await kit.create({ mounts: [{ source: rw, target: '/scratch', readonly: false }] }, allowing);
    await sh(planter, 'ln -s /etc /scratch/etc-link && ln -s / /scratch/root-link');
    for (const [source, extra] of [
      ['/etc', {}],
      [`${ro}/../../../etc`, {}],
      [`${rw}/etc-link`, {}],
      [`${rw}/root-link/etc/passwd`, {}],
      [`${host}`, {}],
      [`${ro}/no-such-file`, {}],
      ['/no/such/dir/outside', {}],
      [ro, { readonly: false }],
    ] as const) {
      const r = await create({ mounts: [{ source, target: '/data', ...extra }] });
      expect(r.status, `${source}: ${r.text}`).toBe(403);
      const e = errorOf(r);
      expect(e.code).toBe('MOUNT_NOT_ALLOWED');
      // a path outside is refused in the same words whether or not it exists
      expect(e.message).not.toMatch(/ENOENT|does not exist/);
    }
    const bad = await create({ mounts: [{ source: ro, target: '/proc/self' }] });
    expect([bad.status, errorOf(bad).code]).toEqual([422, 'INVALID_INPUT']);
    await kit.call('DELETE', `/v1/sandboxes/${planter}`, undefined, { server: allowing });
  });

  it('mounts an allowed dir read-only by default, an rw one rw when asked, and leaves nothing', async () => {
    const r = await create({
      mounts: [
        { source: ro, target: '/data' },
        { source: rw, target: '/out', readonly: false },
      ],
    });
    expect(r.status, r.text).toBe(201);
    const id = r.json().id as string;
    expect(await sh(id, 'cat /data/rows.jsonl; touch /data/x 2>/dev/null || echo data-ro; echo ok > /out/result')).toBe('{"id":1}\ndata-ro\n');
    expect(readFileSync(join(rw, 'result'), 'utf8')).toBe('ok\n');
    expect(readdirSync(ro)).toEqual(['rows.jsonl']);
    expect((await kit.call('DELETE', `/v1/sandboxes/${id}`, undefined, { server: allowing })).status).toBe(204);
    expect(hostMounts()).toEqual([]);
  });

  it('stops a server start on an allowed dir that does not exist', async () => {
    await expect(
      startServer(kit.reg, kit.store, {
        listen: { host: '127.0.0.1', port: 0 },
        maxSandboxes: 1,
        idleTimeoutMs: 60_000,
        ttlMs: 60_000,
        allowMounts: [join(host, 'missing')],
      }),
    ).rejects.toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(/--allow-mount .*missing: ENOENT/) });
  });
});
