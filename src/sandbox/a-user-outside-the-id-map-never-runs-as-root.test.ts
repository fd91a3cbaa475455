/**
 * Issue 25: an image's `User: 4294967295` ran its command as the sandbox's root. The launcher
 * passed the id to setresuid, for which (uid_t)-1 means "leave unchanged", and cast larger ones
 * to uid_t, so 4294967296 became 0 too. A command runs as the in-sandbox user it asks for, or
 * not at all: each id here is what `id -u` / `id -g` really print inside, or a failure.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxLower, freshStateDir, hostInfo } from '../../test/helpers/sandbox-testkit.js';
import { type HostInfo, runOnce } from './index.js';

let host: HostInfo;
let lower: string;
let stateDir: string;

beforeAll(async () => {
  host = await hostInfo();
  lower = await busyboxLower(host.idMap);
  stateDir = await freshStateDir();
});
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

const ids = (user: { uid: number; gid: number }) =>
  runOnce({ lowerDirs: [lower], stateDir }, ['/bin/sh', '-c', 'echo "$(id -u):$(id -g)"'], { user }, { host }).then(
    (o) => ({ ran: o.status === 'ok' && o.exitCode === 0, stdout: o.stdout, stderr: o.stderr }),
    (e: unknown) => ({ ran: false, stdout: '', stderr: String(e) }),
  );

describe('the in-sandbox user of a command', () => {
  it('an id in the map is the id the process gets', async () => {
    expect(await ids({ uid: 1000, gid: 1001 })).toMatchObject({ ran: true, stdout: '1000:1001\n' });
    expect(await ids({ uid: 65535, gid: 65535 })).toMatchObject({ ran: true, stdout: '65535:65535\n' });
  });

  it.each([
    ['(uid_t)-1, "unchanged" to setresuid', { uid: 4294967295, gid: 4294967295 }],
    ['(uid_t)-1 as the uid only', { uid: 4294967295, gid: 1000 }],
    ['(gid_t)-1 as the gid only', { uid: 1000, gid: 4294967295 }],
    ['2^32, which a cast to uid_t makes 0', { uid: 4294967296, gid: 4294967296 }],
    ['an id past the map', { uid: 70000, gid: 70000 }],
  ])('%s is refused, never run as root', async (_what, user) => {
    const r = await ids(user);
    expect(r.stdout).not.toMatch(/^0:|:0$/m);
    expect(r.ran).toBe(false);
    expect(r.stderr).toMatch(new RegExp(`${user.uid}:${user.gid}`));
  });
});
