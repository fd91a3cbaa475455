/**
 * A command in a sandbox gets a session keyring of its own: keys of the runtime's session (the
 * host's secrets, e.g. Kerberos tickets) are neither visible nor usable from inside.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shiftCopyTree } from './index.js';
import { freshStateDir, hostInfo } from './testkit.js';

const run = promisify(execFile);

// Joins a fresh named session keyring, puts a secret in it, then execs its arguments.
const WITH_SESSION_KEY = `
#include <linux/keyctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
  (void)argc;
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "msb-host-session") < 0) return 101;
  if (syscall(SYS_add_key, "user", "msb-host-secret", "hunter2", 7, KEY_SPEC_SESSION_KEYRING) < 0) return 102;
  execvp(argv[1], argv + 1);
  return 103;
}
`;

// Inside the sandbox: describe the session keyring, then find and read the host's secret in it.
const KEY_PROBE = `
#include <linux/keyctl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  char buf[256];
  long n = syscall(SYS_keyctl, KEYCTL_DESCRIBE, KEY_SPEC_SESSION_KEYRING, buf, sizeof buf - 1);
  if (n > 0) { buf[n] = 0; printf("session: %s\\n", buf); }
  long k = syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_SESSION_KEYRING, "user", "msb-host-secret", 0);
  if (k < 0) { printf("search failed\\n"); return 0; }
  n = syscall(SYS_keyctl, KEYCTL_READ, k, buf, sizeof buf - 1);
  if (n >= 0) { buf[n] = 0; printf("secret: %s\\n", buf); }
  return 0;
}
`;

// In a child runtime (whose session holds the secret): one sandbox runs the probe (argv[2] = a
// layer holding it, argv[3] = state dir) and a plain command, printing what both saw.
const RUNNER = `
import { createSandbox } from ${JSON.stringify(join(import.meta.dirname, 'index.ts'))};
import { busyboxLower } from ${JSON.stringify(join(import.meta.dirname, 'testkit.ts'))};
import { probeHost } from ${JSON.stringify(join(import.meta.dirname, 'host.ts'))};
const host = await probeHost();
const sb = await createSandbox({ lowerDirs: [await busyboxLower(host.idMap), process.argv[2]], stateDir: process.argv[3] }, { host });
const probe = await sb.exec(['/opt/keyprobe']);
const keys = await sb.exec(['cat', '/proc/keys']);
await sb.destroy();
process.stdout.write(probe.stdout + probe.stderr + keys.stdout);
`;

describe('keyrings', () => {
  let dir: string;
  let wrapper: string;
  let probeLayer: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'msb-keyring-'));
    await writeFile(join(dir, 'with-key.c'), WITH_SESSION_KEY);
    wrapper = join(dir, 'with-key');
    await run('cc', ['-o', wrapper, join(dir, 'with-key.c')]);
    await writeFile(join(dir, 'probe.c'), KEY_PROBE);
    const probeTree = join(dir, 'probe-tree');
    await mkdir(join(probeTree, 'opt'), { recursive: true });
    // Static: the busybox rootfs has no C library.
    await run('cc', ['-static', '-o', join(probeTree, 'opt', 'keyprobe'), join(dir, 'probe.c')]);
    const host = await hostInfo();
    probeLayer = await shiftCopyTree(probeTree, join(dir, 'probe-layer'), host.idMap);
    await run('chmod', ['0711', dir]);
    await writeFile(join(dir, 'runner.mts'), RUNNER);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("the runtime's session keys can be neither seen nor read inside the sandbox", async () => {
    // The setup really gives the runtime a session holding a readable secret ...
    const host = await run(wrapper, [join(probeLayer, 'opt', 'keyprobe')]);
    expect(host.stdout).toContain('secret: hunter2');
    expect(host.stdout).toContain('msb-host-session');
    // ... and a sandbox started by that runtime finds a session keyring of its own, not that one.
    const stateDir = await freshStateDir();
    const inside = await run(wrapper, [process.execPath, '--import', 'tsx', join(dir, 'runner.mts'), probeLayer, stateDir], { cwd: join(import.meta.dirname, '..', '..') });
    expect(inside.stdout).toMatch(/^session: keyring;0;0;[0-9a-f]+;_ses\n/);
    expect(inside.stdout).toContain('search failed');
    expect(inside.stdout).not.toContain('hunter2');
    expect(inside.stdout).not.toContain('msb-host-session');
  }, 60_000);
});
