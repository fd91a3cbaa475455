/**
 * A container runtime writes /etc/hosts, /etc/hostname and (with network) /etc/resolv.conf into
 * every container; a debootstrap base has no /etc/hosts, so without them `localhost` did not
 * resolve and a real Django task's LiveServerTestCase tests failed with EAI_AGAIN. The files are
 * the runtime's, never a write of the sandbox: its upper stays empty, and a fork child sees the
 * parent's edits of them as of any file.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { debianLower, freshStateDir, hostInfo } from '../../test/helpers/sandbox-testkit.js';
import { forkSourceTarCommand } from './commands.js';
import { createSandbox, forkSandboxShared, type HostInfo, type Sandbox } from './index.js';

const run = promisify(execFile);
let host: HostInfo;
let lowers: string[];
let stateDir: string;

beforeAll(async () => {
  host = await hostInfo();
  lowers = [await debianLower(host.idMap)];
  stateDir = await freshStateDir();
}, 600_000);
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

/** The paths in the sandbox's upper dir, as a fork would copy them. */
async function upperEntries(sb: Sandbox): Promise<string[]> {
  const [cmd, ...args] = forkSourceTarCommand(sb.state.holderPid, sb.state.upperDir);
  const tar = await run(cmd!, args, { encoding: 'buffer', maxBuffer: 64 << 20 });
  const list = await new Promise<string>((resolve, reject) => {
    const t = execFile('tar', ['-t'], (e, out) => (e === null ? resolve(out) : reject(e)));
    t.stdin!.end(tar.stdout);
  });
  return list
    .split('\n')
    .filter((l) => l !== '' && l !== './')
    .sort();
}

const sh = async (sb: Sandbox, script: string) => {
  const o = await sb.exec(['bash', '-c', script]);
  expect(o.stderr).toBe('');
  expect(o.exitCode).toBe(0);
  return o.stdout;
};

// A server on localhost, a client of it: the shape of a LiveServerTestCase.
const SERVE_ON_LOCALHOST =
  `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "localhost", LocalPort => 8081, Listen => 1, ReuseAddr => 1) ` +
  `or die "listen: $@"; print "up\\n"; $|=1; $c = $s->accept; print $c "hello from localhost\\n"; close $c' > /tmp/server.log & ` +
  'until grep -q up /tmp/server.log 2>/dev/null; do sleep 0.05; done; ' +
  'exec 3<>/dev/tcp/localhost/8081; cat <&3; wait';

describe('the files a container runtime writes into a container', () => {
  it('without network: localhost and the hostname resolve, a server on localhost answers, the upper stays empty', async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, network: 'none', config: { hostname: 'task-7' } }, { host });
    try {
      const hosts = await sb.readFile('/etc/hosts');
      expect(hosts.toString()).toMatch(/^127\.0\.0\.1\tlocalhost$/m);
      expect(hosts.toString()).toMatch(/^::1\tlocalhost /m);
      expect(hosts.toString()).toMatch(/^127\.0\.1\.1\ttask-7$/m);
      expect((await sb.readFile('/etc/hostname')).toString()).toBe('task-7\n');
      expect(await sh(sb, 'hostname; getent hosts task-7')).toBe('task-7\n127.0.1.1       task-7\n');
      // v6 first where the kernel has it on lo
      expect(await sh(sb, 'getent hosts localhost')).toMatch(/^(127\.0\.0\.1|::1) +localhost/);
      expect(await sh(sb, 'stat -c "%U:%G %a" /etc/hosts /etc/hostname')).toBe('root:root 644\nroot:root 644\n');
      expect(await sh(sb, SERVE_ON_LOCALHOST)).toBe('hello from localhost\n');
      // the server's log aside, nothing of /etc is the sandbox's own write
      expect(await upperEntries(sb)).toEqual(['./tmp/', './tmp/server.log']);
    } finally {
      await sb.destroy();
    }
  });

  it("with the host's network: the host's resolv.conf and host names as well", async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, network: 'host', config: { hostname: 'task-8' } }, { host });
    try {
      expect((await sb.readFile('/etc/resolv.conf')).toString()).toBe(readFileSync('/etc/resolv.conf', 'utf8'));
      const hosts = (await sb.readFile('/etc/hosts')).toString();
      expect(hosts).toMatch(/^127\.0\.1\.1\ttask-8$/m);
      const hostLines = readFileSync('/etc/hosts', 'utf8').split('\n');
      for (const line of hostLines.filter((l) => l.trim() !== '')) expect(hosts).toContain(`${line}\n`);
      expect(await sh(sb, 'getent hosts task-8')).toBe('127.0.1.1       task-8\n');
    } finally {
      await sb.destroy();
    }
  });

  it("a fork child sees its parent's edit of /etc/hosts, and its removal of /etc/hostname", async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, network: 'none' }, { host });
    const children: Sandbox[] = [];
    try {
      await sh(sb, 'echo "10.1.2.3 db.internal" >> /etc/hosts && rm /etc/hostname');
      for (const r of await forkSandboxShared(sb, 1, { host })) {
        if (!r.ok) throw r.error;
        children.push(r.sandbox);
      }
      const child = children[0]!;
      expect(await sh(child, 'getent hosts db.internal; test -e /etc/hostname && echo present || echo gone')).toBe('10.1.2.3        db.internal\ngone\n');
      // and a reset child is back at the forked state, not at the runtime's files
      await child.reset();
      expect(await sh(child, 'getent hosts db.internal')).toBe('10.1.2.3        db.internal\n');
    } finally {
      for (const c of children) await c.destroy();
      await sb.destroy();
    }
  });
});
