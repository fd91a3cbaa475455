import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, symlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { shiftCopyTree, type Sandbox, type SandboxOptions } from './index.js';
import { CACHE_DIR, leftovers, run, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';

const kit = busyboxSandboxEnv();

async function withSandboxes<T>(n: number, opts: Partial<SandboxOptions>, fn: (sbs: Sandbox[]) => Promise<T>): Promise<T> {
  const sbs: Sandbox[] = [];
  try {
    for (let i = 0; i < n; i++) sbs.push(await kit.create(opts));
    const fps = await Promise.all(sbs.map((s) => sandboxFootprint(s)));
    const r = await fn(sbs);
    await Promise.all(sbs.map((s) => s.destroy()));
    for (const fp of fps) expect(await leftovers(fp)).toEqual([]);
    return r;
  } finally {
    await Promise.all(sbs.map((s) => s.destroy()));
  }
}

function sha(buf: Buffer): string {
  return createHash('sha256').update(buf).digest('hex');
}

describe('isolation', () => {
  it('sees neither host processes nor other sandboxes', async () => {
    await withSandboxes(2, {}, async ([a, b]) => {
      await b!.run('sleep 1000 &');
      const ps = await a!.exec(['sh', '-c', 'ls /proc | grep -c "^[0-9]"; ps -o pid,comm']);
      const [count] = ps.stdout.split('\n');
      expect(Number(count)).toBeLessThan(6);
      expect(ps.stdout).not.toContain('sleep');
      expect(ps.stdout).not.toMatch(/node|vitest/);
      // The test runner's own pid means nothing inside.
      const kill = await a!.exec(['sh', '-c', `kill -0 ${process.pid} 2>&1; echo rc=$?`]);
      expect(kill.stdout).toMatch(/rc=1/);
    });
  });

  it('network none: only loopback, and the host loopback is unreachable', async () => {
    let connections = 0;
    const server: Server = createServer((s) => {
      connections++;
      s.end('hello\n');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      await withSandboxes(1, {}, async ([a]) => {
        const links = await a!.exec(['sh', '-c', 'ls /sys/class/net 2>/dev/null || ip -o link | cut -d: -f2']);
        expect(links.stdout.trim().split(/\s+/)).toEqual(['lo']);
        const o = await a!.exec(['sh', '-c', `nc -w 2 127.0.0.1 ${port} </dev/null; echo rc=$?`], { timeoutMs: 10_000 });
        expect(o.stdout).not.toContain('hello');
        expect(o.stdout).toMatch(/rc=[1-9]/);
      });
      expect(connections).toBe(0);
      await withSandboxes(1, { network: 'host' }, async ([a]) => {
        const o = await a!.exec(['sh', '-c', `nc -w 2 127.0.0.1 ${port} </dev/null`], { timeoutMs: 10_000 });
        expect(o.stdout).toBe('hello\n');
      });
      expect(connections).toBe(1);
    } finally {
      server.close();
    }
  });

  it('cannot change the lower layers or any host file', async () => {
    const before = sha(await readFile(join(kit.lower, 'bin/busybox')));
    const listing = (await readdir(join(kit.lower, 'bin'))).length;
    const marker = `/tmp/msb-host-marker-${process.pid}`;
    await withSandboxes(2, {}, async ([a, b]) => {
      const o = await a!.exec(['sh', '-c', `echo pwned > /bin/busybox.new; rm -rf /bin /etc; echo x > ${marker}; ls /`]);
      expect(o.status).toBe('ok');
      // The other sandbox over the same layers is untouched.
      expect((await b!.exec(['cat', '/etc/passwd'])).stdout).toContain('root:x:0:0');
    });
    expect(sha(await readFile(join(kit.lower, 'bin/busybox')))).toBe(before);
    expect((await readdir(join(kit.lower, 'bin'))).length).toBe(listing);
    await expect(stat(marker)).rejects.toThrow();
  });

  it('cannot gain privileges: no capabilities, no_new_privs, mount refused, setuid bits ignored', async () => {
    // A layer holding a setuid-root (in-sandbox root) copy of busybox.
    const src = await mkdtemp(join(tmpdir(), 'msb-suid-'));
    await mkdir(join(src, 'opt/suid'), { recursive: true });
    await run('cp', ['/bin/busybox', join(src, 'opt/suid/busybox')]);
    await run('chmod', ['4755', join(src, 'opt/suid/busybox')]);
    const suidLayer = await shiftCopyTree(src, join(CACHE_DIR, `suid-layer2-${kit.host.idMap.uidStart}`), kit.host.idMap);
    await rm(src, { recursive: true, force: true });
    const sb = await kit.create({ lowerDirs: [kit.lower, suidLayer] });
    try {
      const st = await sb.exec(['sh', '-c', 'grep -E "^(CapEff|CapPrm|CapAmb|NoNewPrivs)" /proc/self/status; ls -l /opt/suid/busybox']);
      expect(st.stdout).toMatch(/CapPrm:\s+0+\n/);
      expect(st.stdout).toMatch(/CapEff:\s+0+\n/);
      expect(st.stdout).toMatch(/NoNewPrivs:\s+1/);
      expect(st.stdout).toMatch(/-rwsr-xr-x/);
      const suid = await sb.exec(['/opt/suid/busybox', 'grep', 'CapEff', '/proc/self/status']);
      expect(suid.stdout).toMatch(/CapEff:\s+0+\n/);
      const mount = await sb.exec(['sh', '-c', 'mkdir -p /mnt/x; mount -t tmpfs none /mnt/x; echo rc=$?; umount /proc; echo rc2=$?']);
      expect(mount.stdout).toMatch(/rc=[1-9]/);
      expect(mount.stdout).toMatch(/rc2=[1-9]/);
      const un = await sb.exec(['sh', '-c', 'unshare -m true; echo rc=$?; chroot / true; echo rc2=$?']);
      expect(un.stdout).toMatch(/rc=[1-9]/);
      expect(un.stdout).toMatch(/rc2=[1-9]/);
      // A nested user namespace would hand the sandbox a fresh full capability set to attack the
      // kernel with (unprivileged overlay, nftables, ...): its limit is 0 and cannot be raised.
      const nested = await sb.exec([
        'sh',
        '-c',
        'unshare -U true; echo rc=$?; echo 5 > /proc/sys/user/max_user_namespaces; echo rc2=$?; cat /proc/sys/user/max_user_namespaces',
      ]);
      expect(nested.stdout).toMatch(/^rc=[1-9]\nrc2=[1-9]\n0\n$/);
    } finally {
      await sb.destroy();
    }
  });

  it("/sys is there to read and refuses writes, with its own network or the host's", async () => {
    for (const network of ['none', 'host'] as const) {
      await withSandboxes(1, { network }, async ([a]) => {
        const o = await a!.exec([
          'sh',
          '-c',
          'cat /sys/devices/system/cpu/online; echo 1 > /sys/kernel/mm/ksm/run; echo rc=$?; mkdir /sys/fs/cgroup/msb-escape; echo rc=$?',
        ]);
        expect(o.stdout, network).toMatch(/^\d+(-\d+)?(,\d+(-\d+)?)*\nrc=[1-9]\d*\nrc=[1-9]\d*\n$/);
        expect(o.stderr, network).toMatch(/Read-only file system/);
      });
    }
    expect(
      await stat('/sys/fs/cgroup/msb-escape').then(
        () => true,
        () => false,
      ),
    ).toBe(false);
  });

  it('symlinks planted at /proc, /dev, /tmp and /sys in a layer do not redirect mounts to host paths', async () => {
    const target = await mkdtemp(join(tmpdir(), 'msb-plant-target-'));
    const src = await mkdtemp(join(tmpdir(), 'msb-plant-'));
    for (const d of ['proc', 'dev', 'tmp', 'sys']) await symlink(target, join(src, d));
    const evil = await shiftCopyTree(src, join(CACHE_DIR, `planted-mount-points-${kit.host.idMap.uidStart}`), kit.host.idMap);
    await rm(src, { recursive: true, force: true });
    // The evil layer sits on top of busybox (whose /proc etc. are ordinary dirs).
    const sb = await kit.create({ lowerDirs: [kit.lower, evil] });
    try {
      const o = await sb.exec([
        'sh',
        '-c',
        'grep -c . /proc/self/status >/dev/null && echo proc-ok; echo hi > /dev/null && ' +
          'echo dev-ok; echo t > /tmp/t && echo tmp-ok; test -d /sys/kernel && echo sys-ok',
      ]);
      expect(o.stdout).toBe('proc-ok\ndev-ok\ntmp-ok\nsys-ok\n');
      expect(await readdir(target)).toEqual([]);
      expect(await readFile('/proc/self/mountinfo', 'utf8')).not.toContain(target);
    } finally {
      await sb.destroy();
    }
    expect(await readdir(target)).toEqual([]);
    await rm(target, { recursive: true, force: true });
  });
});
