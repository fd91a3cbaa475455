/**
 * What a command in a sandbox can reach of the kernel beyond its namespaces: not the runtime's
 * session keyring (the host's secrets, e.g. Kerberos tickets), and not the syscalls the seccomp
 * filter refuses. Probed with small static programs, as an attacker inside would.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, shiftCopyTree } from './index.js';
import { busyboxLower, freshStateDir, hostInfo } from '../../test/helpers/sandbox-testkit.js';

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

// Calls each syscall the filter refuses (with harmless arguments) and prints its errno.
const SYSCALL_PROBE = `
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static void probe(const char *name, long nr) {
  errno = 0;
  long r = syscall(nr, 0, 0, 0, 0, 0);
  printf("%s %ld %d\\n", name, r, r < 0 ? errno : 0);
}
int main(int argc, char **argv) {
  probe("keyctl", SYS_keyctl);
  probe("bpf", SYS_bpf);
  probe("perf_event_open", SYS_perf_event_open);
  probe("userfaultfd", SYS_userfaultfd);
  probe("io_uring_setup", SYS_io_uring_setup);
  probe("open_by_handle_at", SYS_open_by_handle_at);
  probe("fsopen", SYS_fsopen);
  probe("getppid", SYS_getppid);
  /* With a pid: try to attach to it (only ever run inside the sandbox). */
  if (argc > 1) {
    errno = 0;
    long r = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, atoi(argv[1]), 0, 0);
    printf("ptrace %ld %d\\n", r, r < 0 ? errno : 0);
  }
  return 0;
}
`;

// In a child runtime (whose session holds the secret): one sandbox runs the probe (argv[2] = a
// layer holding it, argv[3] = state dir) and a plain command, printing what both saw.
const RUNNER = `
import { createSandbox } from ${JSON.stringify(join(import.meta.dirname, 'index.ts'))};
import { busyboxLower } from ${JSON.stringify(join(import.meta.dirname, '../../test/helpers/sandbox-testkit.ts'))};
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
    await writeFile(join(dir, 'syscalls.c'), SYSCALL_PROBE);
    await run('cc', ['-static', '-o', join(probeTree, 'opt', 'syscalls'), join(dir, 'syscalls.c')]);
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
    // ... and a sandbox started by that runtime can reach no key of it (keyctl is refused; were it
    // not, the command's session keyring is a fresh one of its own).
    const stateDir = await freshStateDir();
    const inside = await run(wrapper, [process.execPath, '--import', 'tsx', join(dir, 'runner.mts'), probeLayer, stateDir], {
      cwd: join(import.meta.dirname, '..', '..'),
    });
    expect(inside.stdout).not.toMatch(/^session: .*msb-host-session/m);
    expect(inside.stdout).toContain('search failed');
    expect(inside.stdout).not.toContain('hunter2');
    expect(inside.stdout).not.toContain('msb-host-session');
  }, 600_000);

  it("the seccomp filter refuses the syscalls outside a task's needs with EPERM, and allows the rest", async () => {
    const host = await hostInfo();
    // Outside a sandbox the probe reaches these syscalls (errors other than EPERM, or success).
    const outside = (await run(join(probeLayer, 'opt', 'syscalls'))).stdout;
    expect(outside).toMatch(/^io_uring_setup -1 (14|22)$/m);
    const stateDir = await freshStateDir();
    const sb = await createSandbox({ lowerDirs: [await busyboxLower(host.idMap), probeLayer], stateDir }, { host });
    try {
      // pid 1 here is the command's own init: privileged in the sandbox and not dumpable.
      const o = await sb.exec(['/opt/syscalls', '1']);
      const lines = o.stdout.trim().split('\n');
      expect(lines).toHaveLength(9);
      for (const l of lines.slice(0, 7)) expect(l).toMatch(/^\S+ -1 1$/);
      expect(lines[7]).toMatch(/^getppid \d+ 0$/);
      expect(lines[8]).toBe('ptrace -1 1');
    } finally {
      await sb.destroy();
    }
  });
});
