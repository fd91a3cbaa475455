/**
 * Sandboxes over layers laid out once with their real owners, mounted idmapped through each
 * sandbox's own user namespace, each sandbox with an id range of its own (root only).
 */
import { chmod, chown, lstat, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeIdmappedLayers } from './idmap.js';
import { liveIdRanges } from './idpool.js';
import { createSandbox, forkSandbox, makeBusyboxRootfs, type HostInfo, type Sandbox } from './index.js';
import { freshStateDir, hostInfo, leftovers, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';

let host: HostInfo;
let work: string;
let lower: string;
let stateDir: string;

/** Owner, mode and content of every file the tests write to, to show the layer is untouched. */
async function snapshot(paths: string[]): Promise<string[]> {
  return Promise.all(
    paths.map(async (p) => {
      const st = await lstat(p);
      return `${p} ${st.uid}:${st.gid} ${st.mode.toString(8)} ${st.mtimeMs} ${(await readFile(p)).toString('hex')}`;
    }),
  );
}

/** Host uid range (start, count) a holder's user namespace maps, as /proc shows it. */
async function hostRange(sb: Sandbox): Promise<[number, number]> {
  const [inside, start, count] = (await readFile(`/proc/${sb.state.holderPid}/uid_map`, 'utf8')).trim().split(/\s+/).map(Number);
  expect(inside).toBe(0);
  return [start!, count!];
}

/** The sandbox's upper dir as the host sees it (a tmpfs in the holder's mount namespace). */
function upper(sb: Sandbox, rel: string): string {
  return `/proc/${sb.state.holderPid}/root${sb.state.upperDir}/u/${rel}`;
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('idmapped layers need root');
  host = await hostInfo();
  work = await mkdtemp(join(tmpdir(), 'msb-idmap-'));
  // A store-like private tree: root-only, as a store's layers/ is. The sandbox ids never walk it.
  await chmod(work, 0o700);
  lower = join(work, 'layer');
  await mkdir(lower);
  await makeBusyboxRootfs(lower);
  await writeFile(join(lower, 'etc/userfile'), 'user\n');
  await chown(join(lower, 'etc/userfile'), 1000, 1001);
  await writeFile(join(lower, 'etc/secret'), 'root only\n');
  await chmod(join(lower, 'etc/secret'), 0o600);
  await mkdir(join(lower, 'home/u'), { recursive: true, mode: 0o700 });
  await chown(join(lower, 'home/u'), 1000, 1001);
  stateDir = await freshStateDir();
});
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
  await rm(work, { recursive: true, force: true });
});

describe('idmapped layers', () => {
  it('this host supports them (the probe the runtime uses says so)', async () => {
    expect(await probeIdmappedLayers(host, lower)).toEqual({ ok: true });
  });

  it('show the layer files with their real owners inside, from a layer tree the sandbox ids cannot reach', async () => {
    const sb = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true }, { host });
    try {
      const o = await sb.exec('stat -c "%n %u:%g %a" /bin/busybox /etc/passwd /etc/userfile /etc/secret /home/u; cat /etc/secret; id -u');
      expect(o).toMatchObject({ status: 'ok', exitCode: 0 });
      expect(o.stdout.split('\n')).toEqual([
        '/bin/busybox 0:0 755',
        '/etc/passwd 0:0 644',
        '/etc/userfile 1000:1001 644',
        '/etc/secret 0:0 600',
        '/home/u 1000:1001 700',
        'root only',
        '0',
        '',
      ]);
    } finally {
      await sb.destroy();
    }
  });

  it('land copy-ups in the upper owned by the sandbox own host range, and leave the layer untouched', async () => {
    const touched = ['etc/passwd', 'etc/userfile', 'etc/secret', 'bin/busybox'].map((p) => join(lower, p));
    const before = await snapshot(touched);
    const sb = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true, capabilities: 'default' }, { host });
    try {
      const [start] = await hostRange(sb);
      const o = await sb.exec(
        'echo more >> /etc/userfile && chown 7:8 /etc/passwd && chmod 644 /etc/secret && ' +
          'echo new > /etc/newfile && chown 1000:1001 /etc/newfile && chmod u+s /bin/busybox',
      );
      expect(o).toMatchObject({ status: 'ok', exitCode: 0 });
      const owner = async (rel: string): Promise<string> => {
        const st = await lstat(upper(sb, rel));
        return `${st.uid - start}:${st.gid - start}`;
      };
      expect(start).toBe(sb.state.idMap.uidStart);
      expect(await owner('etc/userfile')).toBe('1000:1001');
      expect(await owner('etc/passwd')).toBe('7:8');
      expect(await owner('etc/secret')).toBe('0:0');
      expect(await owner('etc/newfile')).toBe('1000:1001');
      expect(await readFile(upper(sb, 'etc/userfile'), 'utf8')).toBe('user\nmore\n');
      // Inside, the changes show as made.
      expect((await sb.exec('stat -c "%u:%g" /etc/passwd')).stdout).toBe('7:8\n');
    } finally {
      await sb.destroy();
    }
    expect(await snapshot(touched)).toEqual(before);
  });

  it('give two sandboxes alive at once disjoint host uid ranges, none of them the shared one', async () => {
    const a = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true }, { host });
    const b = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true }, { host });
    try {
      const [sa, ca] = await hostRange(a);
      const [sb, cb] = await hostRange(b);
      expect([ca, cb]).toEqual([65536, 65536]);
      expect(sa + ca <= sb || sb + cb <= sa).toBe(true);
      for (const s of [sa, sb]) expect(s === host.idMap.uidStart).toBe(false);
      // What each writes is owned, seen from the host, by its own range.
      await a.exec('echo a > /tmp/mine');
      await b.exec('echo b > /tmp/mine');
      expect((await lstat(upper(a, 'tmp/mine'))).uid).toBe(sa);
      expect((await lstat(upper(b, 'tmp/mine'))).uid).toBe(sb);
      // And each holds a slot of the pool until destroyed.
      const slots = liveIdRanges();
      expect(slots).toContain(Number(a.state.idSlot!.split('/').pop()));
      expect(slots).toContain(Number(b.state.idSlot!.split('/').pop()));
    } finally {
      await a.destroy();
      await b.destroy();
    }
    expect(liveIdRanges()).not.toContain(Number(a.state.idSlot!.split('/').pop()));
    expect(liveIdRanges()).not.toContain(Number(b.state.idSlot!.split('/').pop()));
  });

  it('fork: a branch gets the source state and a range of its own', async () => {
    const src = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true, capabilities: 'default' }, { host });
    const branches: Sandbox[] = [];
    try {
      await src.exec('echo base > /etc/state && chown 1000:1001 /etc/state');
      branches.push(...(await forkSandbox(src, 1)));
      const [br] = branches;
      const [s0] = await hostRange(src);
      const [s1] = await hostRange(br!);
      expect(s1).not.toBe(s0);
      expect((await br!.exec('cat /etc/state; stat -c %u:%g /etc/state /etc/userfile')).stdout).toBe('base\n1000:1001\n1000:1001\n');
      expect((await lstat(upper(br!, 'etc/state'))).uid).toBe(s1 + 1000);
    } finally {
      await Promise.all(branches.map((b) => b.destroy()));
      await src.destroy();
    }
  });

  it('sessions, a disk upper and destroy work as over shifted layers, leaving nothing behind', async () => {
    const sb = await createSandbox({ lowerDirs: [lower], stateDir, idmapLowers: true, upper: 'disk' }, { host });
    const fp = await sandboxFootprint(sb);
    const [start] = await hostRange(sb);
    try {
      expect(await sb.run('cd /tmp && export X=1')).toMatchObject({ exitCode: 0 });
      expect((await sb.run('echo $X $(pwd) > out; cat out')).stdout).toBe('1 /tmp\n');
      // a disk upper is on the host's disk, owned by the sandbox's range
      expect((await lstat(join(sb.state.upperDir, 'u/tmp/out'))).uid).toBe(start);
    } finally {
      await sb.destroy();
    }
    expect(await leftovers(fp)).toEqual([]);
  });

  it('need nothing above their own dir reachable by their ids: a state dir under a root-only dir works, forks and disk uppers included', async () => {
    const privateState = join(work, 'private-state'); // work is 0700, root's
    for (const upper of ['tmpfs', 'disk'] as const) {
      const sb = await createSandbox({ lowerDirs: [lower], stateDir: privateState, idmapLowers: true, upper, capabilities: 'default' }, { host });
      const branches: Sandbox[] = [];
      try {
        expect((await sb.exec('echo hi > /tmp/x && cat /etc/secret')).stdout).toBe('root only\n');
        expect((await sb.run('cat /tmp/x')).stdout).toBe('hi\n');
        branches.push(...(await forkSandbox(sb, 1)));
        expect((await branches[0]!.exec('cat /tmp/x')).stdout).toBe('hi\n');
      } finally {
        await Promise.all(branches.map((b) => b.destroy()));
        await sb.destroy();
      }
    }
  });
});
