/**
 * Host paths bind-mounted into a sandbox, tried as an attacker would: a target that is a layer's
 * symlink to a host path mounts inside the sandbox, never over the host path; `..` in a target and
 * a source symlink swapped in after the runtime resolved it are refused; a read-only mount stays
 * so for a sandbox root holding every capability it may have; the mounts are never the sandbox's
 * writes (its upper stays empty) and are gone with it; rootless, the same holds.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { cp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyboxLower, freshStateDir, hostInfo, leftovers, REPO_ROOT, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';
import { ensureTestUser, runScenarioAs } from '../../test/helpers/test-user.js';
import { forkSourceTarCommand, runCommand } from './commands.js';
import { createSandbox, forkSandboxShared, resolveIdMap, runOnce, type HostInfo } from './index.js';
import { endSandbox, prepareSandbox } from './prepare.js';
import { SandboxOptionsSchema } from './sandbox.js';

const run = promisify(execFile);
let host: HostInfo;
let lower: string;
let stateDir: string;
let work: string;

beforeAll(async () => {
  host = await hostInfo();
  lower = await busyboxLower(host.idMap);
  stateDir = await freshStateDir();
  work = mkdtempSync(join(tmpdir(), 'msb-binds-'));
  chmodSync(work, 0o755);
}, 600_000);
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

/** A host dir with one file in it. */
function sourceDir(name: string): string {
  const d = join(work, name);
  mkdirSync(d, { mode: 0o755 });
  writeFileSync(join(d, 'hello'), `hello from ${name}\n`);
  return d;
}

/** The paths in a sandbox's upper dir, as a fork would copy them. */
async function upperEntries(holderPid: number, upperDir: string): Promise<string[]> {
  const [cmd, ...args] = forkSourceTarCommand(holderPid, upperDir);
  const tar = await run(cmd!, args, { encoding: 'buffer', maxBuffer: 64 << 20 });
  const list = await new Promise<string>((resolve, reject) => {
    const t = execFile('tar', ['-t'], (e, out) => (e === null ? resolve(out) : reject(e)));
    t.stdin!.end(tar.stdout);
  });
  return list.split('\n').filter((l) => l !== '' && l !== './');
}

/** The host's mount table lines naming `path`. */
const hostMountsOf = (path: string): string[] =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(path));

describe('bind mounts (root)', () => {
  it('show the source, keep read-only ones so against a capable root, write rw ones through, and leave nothing', async () => {
    const ro = sourceDir('ro');
    const rw = sourceDir('rw');
    const sb = await createSandbox(
      {
        lowerDirs: [lower],
        stateDir,
        capabilities: 'default',
        mounts: [
          { source: ro, target: '/opt/tools', readonly: true },
          { source: rw, target: '/work/out' },
          { source: join(ro, 'hello'), target: '/etc/greeting' },
        ],
      },
      { host },
    );
    const fp = await sandboxFootprint(sb);
    const sh = (c: string) => sb.exec(['sh', '-c', c]);
    expect((await sh('cat /opt/tools/hello /etc/greeting')).stdout).toBe('hello from ro\nhello from ro\n');
    // read-only: no write, no remount (no CAP_SYS_ADMIN over it), no new mount namespace to do it in
    const write = await sh('echo x > /opt/tools/new');
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toMatch(/Read-only file system/);
    const remount = await sh('mount -o remount,bind,rw /opt/tools && echo remounted; echo y > /opt/tools/new2');
    expect(remount.stdout).not.toMatch(/remounted/);
    expect(remount.exitCode).not.toBe(0);
    const nested = await sh('unshare -Urm sh -c "mount -o remount,bind,rw /opt/tools; echo z > /opt/tools/new3" && echo escaped');
    expect(nested.stdout).not.toMatch(/escaped/);
    expect((await sh('umount /opt/tools && echo unmounted')).stdout).not.toMatch(/unmounted/);
    expect(readdirSync(ro).sort()).toEqual(['hello']);
    // rw, the caller's own: written through, as the caller (root) on the host
    expect((await sh('echo result > /work/out/r && ls -ln /work/out/r')).exitCode).toBe(0);
    expect(readFileSync(join(rw, 'r'), 'utf8')).toBe('result\n');
    expect(statSync(join(rw, 'r')).uid).toBe(0);
    // not the sandbox's writes: its upper, what a fork or snapshot copies, holds none of them
    // (a busybox root lacks /sys: init's mount point for it is the one entry there)
    expect(await upperEntries(sb.state.holderPid, sb.state.upperDir)).toEqual(['./sys/']);
    await sb.destroy();
    expect(await leftovers(fp)).toEqual([]);
    expect(hostMountsOf(ro)).toEqual([]);
    expect(readdirSync(rw).sort()).toEqual(['hello', 'r']);
  });

  it("stay with a fork's children and across a reset, never in what they copy", async () => {
    const src = sourceDir('kept');
    const sb = await createSandbox({ lowerDirs: [lower], stateDir, mounts: [{ source: src, target: '/data', readonly: true }] }, { host });
    await sb.exec(['sh', '-c', 'echo mine > /mine']);
    const [forked] = await forkSandboxShared(sb, 1);
    if (forked?.ok !== true) throw new Error(`fork failed: ${JSON.stringify(forked)}`);
    const child = forked.sandbox;
    const seen = await child.exec(['sh', '-c', 'cat /data/hello /mine']);
    expect([seen.exitCode, seen.stdout]).toEqual([0, 'hello from kept\nmine\n']);
    expect(await upperEntries(child.state.holderPid, child.state.upperDir)).not.toContain('./data/hello');
    await child.destroy();
    await sb.reset();
    const after = await sb.exec(['sh', '-c', 'cat /data/hello; test -e /mine || echo reset']);
    expect(after.stdout).toBe('hello from kept\nreset\n');
    await sb.destroy();
    expect(hostMountsOf(src)).toEqual([]);
  });

  it('mount at a layer symlink to a host path inside the sandbox, never over the host path', async () => {
    const victim = mkdtempSync(join(tmpdir(), 'msb-victim-'));
    writeFileSync(join(victim, 'keep'), 'host file\n');
    const hostile = join(work, 'hostile-layer');
    await cp(lower, hostile, { recursive: true, verbatimSymlinks: true });
    // the layer's /evil and /etc/evil point at the host dir, absolutely and through ".."
    symlinkSync(victim, join(hostile, 'evil'));
    symlinkSync(`../../../../../../..${victim}`, join(hostile, 'etc', 'evil'));
    const src = sourceDir('over');
    const outcome = await runOnce(
      {
        lowerDirs: [hostile],
        stateDir,
        mounts: [
          { source: src, target: '/evil' },
          { source: src, target: '/etc/evil/deeper' },
        ],
      },
      ['sh', '-c', 'cat /evil/hello /etc/evil/deeper/hello; ls /evil'],
      {},
      { host },
    );
    expect(outcome.exitCode, outcome.stderr).toBe(0);
    expect(outcome.stdout).toBe('hello from over\nhello from over\nhello\n');
    expect(readdirSync(victim)).toEqual(['keep']);
    expect(hostMountsOf(victim)).toEqual([]);
    rmSync(victim, { recursive: true, force: true });
  });

  it('refuse ".." and the sandbox\'s own trees as targets before anything starts', async () => {
    const src = sourceDir('refused');
    const stateDir = await freshStateDir();
    for (const target of ['/data/../../etc', '/proc/x', '/', 'relative', '/a//b', '/dev']) {
      await expect(createSandbox({ lowerDirs: [lower], stateDir, mounts: [{ source: src, target }] }, { host })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
    }
    await expect(
      createSandbox(
        {
          lowerDirs: [lower],
          stateDir,
          mounts: [
            { source: src, target: '/a' },
            { source: src, target: '/a/b' },
          ],
        },
        { host },
      ),
    ).rejects.toThrow(/one is inside the other/);
    expect(readdirSync(stateDir)).toEqual([]);
    await rm(stateDir, { recursive: true, force: true });
  });

  it('are refused by the launcher itself for a swapped-in source symlink or a target the runtime would refuse', async () => {
    const real = sourceDir('swap-real');
    const link = join(work, 'swap-link');
    symlinkSync('/etc', link);
    const p = await prepareSandbox(
      SandboxOptionsSchema.parse({ lowerDirs: [lower], stateDir, mounts: [{ source: real, target: '/data' }] }),
      host,
      () => undefined,
    );
    try {
      expect(p.spec.binds).toEqual([{ source: real, target: '/data', readonly: false }]);
      // the runtime resolved the source; by the time the launcher opens it, a symlink stands there;
      // and targets a caller of the launcher did not check
      for (const [binds, says] of [
        [[{ source: link, target: '/data', readonly: true }], /no symlink on its path/],
        [[{ source: real, target: '/data/../../etc', readonly: true }], /"\.\." components are refused/],
        [[{ source: real, target: '/proc/sys', readonly: true }], /\/proc, \/dev and \/sys are the sandbox's own/],
        [
          [
            { source: real, target: '/a', readonly: true },
            { source: real, target: '/a/b', readonly: true },
          ],
          /one is inside the other/,
        ],
      ] as const) {
        const argv = runCommand({ ...p.spec, binds }, { caps: [], env: {}, argv: ['cat', '/data/hostname'], rlimits: p.rlimits, workdir: '/' });
        const r = await run(argv[0]!, argv.slice(1)).then(
          (o) => ({ code: 0, ...o }),
          (e: { code: number; stdout: string; stderr: string }) => e,
        );
        expect(r.code).not.toBe(0);
        expect(r.stdout).toBe('');
        expect(r.stderr).toMatch(says);
      }
    } finally {
      await endSandbox(stateDir, p.state, p.cgroup);
    }
  });
});

describe('bind mounts (rootless)', () => {
  it('a root-owned source is read-only by default, shown, and gone with the sandbox', async () => {
    const USER = 'msbtest';
    const { uid, gid } = await ensureTestUser(USER, 300_000);
    const range = await resolveIdMap({ user: { name: USER, uid } });
    const rootless = await busyboxLower(range);
    const src = sourceDir('for-rootless');
    const { out, work: theirs } = await runScenarioAs(
      { name: USER, uid, gid },
      'msb-rootless-binds-',
      (dir) => `
      import { runOnce, probeHost, listSandboxes } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};
      const host = await probeHost();
      const base = { lowerDirs: [${JSON.stringify(rootless)}], stateDir: ${JSON.stringify(dir)} };
      const o = await runOnce({ ...base, mounts: [{ source: ${JSON.stringify(src)}, target: '/mnt/src' }] },
        ['sh', '-c', 'cat /mnt/src/hello; echo x > /mnt/src/w 2>&1 || echo refused; mount -o remount,bind,rw /mnt/src 2>/dev/null || echo no-remount'],
        {}, { host, warn: () => undefined });
      console.log(JSON.stringify({ o, left: (await listSandboxes(${JSON.stringify(dir)})).length }));
      process.exit(0);
      `,
    );
    const { o, left } = out as { o: { exitCode: number; stdout: string; stderr: string }; left: number };
    expect(o.stdout, o.stderr).toMatch(/^hello from for-rootless\n(.|\n)*refused\nno-remount\n$/);
    expect(readdirSync(src)).toEqual(['hello']);
    expect(left).toBe(0);
    expect(hostMountsOf(src)).toEqual([]);
    await rm(theirs, { recursive: true, force: true });
  });
});
