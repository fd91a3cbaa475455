/**
 * Issue 25: an image config's `User` is an in-sandbox id, and a sandbox has ids 0..65535
 * (DEFAULT_ID_COUNT). A numeric id outside that range, given or found in the image's
 * /etc/passwd or /etc/group, is refused at import with one clear line naming the image and the
 * value (exit 2), never a zod dump (a huge one gave that, exit 1) and never an environment whose
 * command would fail, or once ran as root (4294967295). Names resolve as before.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTar, writeLayout } from '../../test/helpers/oci-layout.js';
import { runCli } from '../../test/helpers/run-cli.js';
import { LocalRegistry } from '../registry/local.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { StorePaths } from '../store/paths.js';
import { importImage } from './import.js';

const work = mkdtempSync(join(tmpdir(), 'ms-image-users-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const PASSWD = 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/home/app:/bin/sh\nwrap:x:4294967295:0::/:/bin/sh\nfar:x:1000:70000::/:/bin/sh\n';
const GROUP = 'root:x:0:\napp:x:1001:\nwide:x:65536:\n';

let n = 0;
async function layoutWithUser(user: string): Promise<string> {
  const dir = join(work, `layout-${n++}`);
  const t = await makeTar([
    { name: 'etc/', type: 'directory' },
    { name: 'etc/passwd', data: PASSWD },
    { name: 'etc/group', data: GROUP },
  ]);
  writeLayout(dir, [{ layers: [{ blob: t, tar: t }], config: { User: user } }]);
  return dir;
}

async function importWithUser(user: string): Promise<{ uid: number; gid: number }> {
  const dir = await layoutWithUser(user);
  const reg = new LocalRegistry(join(work, `reg-${n}`));
  await importImage(reg, new StorePaths(join(work, `store-${n}`)), `oci:${dir}`, { tag: 'u/x' });
  return (await resolveEnv(reg, 'u/x')).config.config.user;
}

describe("an image config's User", () => {
  it.each([
    ['app', { uid: 1000, gid: 1001 }],
    ['app:root', { uid: 1000, gid: 0 }],
    ['1000', { uid: 1000, gid: 1001 }],
    ['1234:4321', { uid: 1234, gid: 4321 }],
    ['65535:65535', { uid: 65535, gid: 65535 }],
    ['', { uid: 0, gid: 0 }],
  ])('%j in range imports as %j', async (user, ids) => {
    expect(await importWithUser(user)).toEqual(ids);
  });

  it.each([
    ['4294967295', /User "4294967295": uid 4294967295 is outside the sandbox's ids 0\.\.65535/],
    ['65536', /uid 65536 is outside/],
    ['0:4294967295', /gid 4294967295 is outside/],
    ['99999999999999999999999', /uid 99999999999999999999999 is outside/],
    ['wrap', /User "wrap": uid 4294967295 \(from the image's \/etc\/passwd\) is outside/],
    ['far', /User "far": gid 70000 \(from the image's \/etc\/passwd\) is outside/],
    ['app:wide', /User "app:wide": gid 65536 \(from the image's \/etc\/group\) is outside/],
  ])('%j is refused naming the image and the value', async (user, message) => {
    const err = await importWithUser(user).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringMatching(message) });
    expect((err as Error).message).toMatch(/^oci:\/.*layout-\d+ config: /);
  });

  it('the CLI says so in one line with exit 2, no zod dump, and tags nothing', async () => {
    const dir = await layoutWithUser('99999999999999999999999');
    const reg = join(work, 'cli-registry');
    const r = await runCli(['--registry', reg, '--store', join(work, 'cli-store'), 'import', `oci:${dir}`, '--tag', 'u/cli']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: oci:.* config: User "99999999999999999999999": uid .* is outside the sandbox's ids 0\.\.65535\nhint: /m);
    expect(r.stderr).not.toMatch(/ZodError|"code":|too_big|expected/);
    expect(await new LocalRegistry(reg).getRef('u/cli')).toBeNull();
  });
});
