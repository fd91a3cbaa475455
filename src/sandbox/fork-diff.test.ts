import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, ensureDebianRootfs, forkSandbox, shiftCopyTree, type HostInfo } from './index.js';
import { CACHE_DIR, debianLower, freshStateDir, hostInfo, leftovers, run, sandboxFootprint } from '../../test/helpers/sandbox-testkit.js';

let host: HostInfo;
let lowers: string[];
let stateDir: string;
let repoSrc: string;
let layerSrc: string | undefined;

async function git(cwd: string, ...args: string[]): Promise<string> {
  return (await run('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], { cwd })).stdout;
}

beforeAll(async () => {
  host = await hostInfo();
  const debian = await debianLower(host.idMap);
  // The instance layer: a real git repository at a base commit.
  const layer = await mkdtemp(join(tmpdir(), 'msb-repo-layer-'));
  repoSrc = join(layer, 'work/repo');
  await run('mkdir', ['-p', repoSrc]);
  await git(repoSrc, 'init', '-q', '-b', 'main');
  await writeFile(join(repoSrc, 'hello.txt'), 'hello\nworld\n');
  await writeFile(join(repoSrc, 'gone.txt'), 'to be deleted\n');
  await writeFile(join(repoSrc, '.gitignore'), '*.pyc\n');
  await git(repoSrc, 'add', '-A');
  await git(repoSrc, 'commit', '-q', '-m', 'base');
  const shifted = await shiftCopyTree(layer, join(CACHE_DIR, `repo-layer-${process.pid}-${host.idMap.uidStart}`), host.idMap);
  lowers = [debian, shifted];
  layerSrc = layer;
  stateDir = await freshStateDir();
}, 600_000);
afterAll(async () => {
  await rm(stateDir, { recursive: true, force: true });
  if (lowers?.[1] !== undefined) await rm(lowers[1], { recursive: true, force: true });
  if (layerSrc !== undefined) await rm(layerSrc, { recursive: true, force: true });
});

describe('diff and fork over a real repository', () => {
  it('diff is the agent submission: edits, deletions, untracked and binary files, not ignored ones', async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, config: { workdir: '/work/repo' } }, { host });
    const fp = await sandboxFootprint(sb);
    try {
      const o = await sb.run(
        'sed -i s/world/there/ hello.txt && rm gone.txt && echo new > added.txt && ' +
          'printf "\\x00\\x01\\x02" > blob.bin && echo junk > x.pyc && chmod +x hello.txt',
      );
      expect(o).toMatchObject({ status: 'ok', exitCode: 0 });
      const patch = await sb.diff();
      expect(patch).toContain('diff --git a/hello.txt b/hello.txt');
      expect(patch).toContain('+there');
      expect(patch).toContain('deleted file mode');
      expect(patch).toContain('+++ b/added.txt');
      expect(patch).toContain('GIT binary patch');
      expect(patch).not.toContain('x.pyc');
      expect(patch).not.toContain('old mode'); // core.fileMode=false
      // The repository's own index is untouched (the throwaway index did the work).
      expect((await sb.exec(['git', 'status', '--porcelain'])).stdout).toContain('?? added.txt');
      // The patch applies to a clean checkout of the base commit.
      const clone = await mkdtemp(join(tmpdir(), 'msb-clone-'));
      await run('git', ['clone', '-q', repoSrc, clone]);
      await writeFile(join(clone, 'sub.patch'), patch);
      await git(clone, 'apply', '--index', 'sub.patch');
      expect(await git(clone, 'status', '--porcelain')).toMatch(/D {2}gone.txt/);
      await rm(clone, { recursive: true, force: true });
      await writeFile(join(stateDir, 'unused'), '');
    } finally {
      await sb.destroy();
    }
    expect(await leftovers(fp)).toEqual([]);
  });

  it('fork branches the current filesystem state into independent sandboxes sharing the layers', async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, config: { workdir: '/work/repo' } }, { host });
    try {
      await sb.run('echo step1 >> hello.txt && mkdir -p /root/cache && echo c > /root/cache/f && rm /etc/hostname');
      await sb.writeFile('/work/repo/notes.md', 'from the parent\n');
      const forks = await forkSandbox(sb, 2);
      const fps = await Promise.all(forks.map((f) => sandboxFootprint(f)));
      try {
        for (const f of forks) {
          expect(f.state.lowerDirs).toEqual(lowers);
          expect(
            (await f.exec(['sh', '-c', 'tail -1 hello.txt; cat notes.md /root/cache/f; test -e /etc/hostname && echo present || echo deleted'])).stdout,
          ).toBe('step1\nfrom the parent\nc\ndeleted\n');
        }
        await forks[0]!.run('echo only-fork0 >> hello.txt');
        expect((await forks[1]!.exec(['tail', '-1', 'hello.txt'])).stdout).toBe('step1\n');
        expect((await sb.exec(['tail', '-1', 'hello.txt'])).stdout).toBe('step1\n');
        expect(await forks[0]!.diff()).toContain('+only-fork0');
        expect(await forks[1]!.diff()).not.toContain('only-fork0');
        expect((await forks[1]!.readFile('/work/repo/notes.md')).toString()).toBe('from the parent\n');
      } finally {
        await Promise.all(forks.map((f) => f.destroy()));
      }
      for (const fp of fps) expect(await leftovers(fp)).toEqual([]);
    } finally {
      await sb.destroy();
    }
  });

  it('readFile and writeFile resolve symlinks inside the sandbox, never on the host', async () => {
    const hostSecret = join(await mkdtemp(join(tmpdir(), 'msb-secret-')), 'secret');
    await writeFile(hostSecret, 'host secret\n');
    const sb = await createSandbox({ lowerDirs: lowers, stateDir }, { host });
    try {
      await sb.exec(['ln', '-s', hostSecret, '/tmp/link']);
      await expect(sb.readFile('/tmp/link')).rejects.toThrow(/cannot read/);
      // The link's target dir does not exist inside: the write fails rather than reaching the host.
      await expect(sb.writeFile('/tmp/link', 'overwritten\n')).rejects.toThrow(/cannot write/);
      await sb.exec(['mkdir', '-p', join(hostSecret, '..')]);
      await sb.writeFile('/tmp/link', 'overwritten\n');
      expect(await run('cat', [hostSecret]).then((r) => r.stdout)).toBe('host secret\n');
      // The write landed inside the sandbox, at the link's in-sandbox target.
      expect((await sb.readFile(hostSecret)).toString()).toBe('overwritten\n');
    } finally {
      await sb.destroy();
      await rm(join(hostSecret, '..'), { recursive: true, force: true });
    }
  });

  it('runs commands, sessions and file writes as a non-root config.user without capabilities', async () => {
    const sb = await createSandbox({ lowerDirs: lowers, stateDir, config: { user: { uid: 1000, gid: 1000 }, workdir: '/tmp' } }, { host });
    try {
      const o = await sb.exec(['sh', '-c', 'id -u; id -g; grep -E "^Cap(Eff|Prm)" /proc/self/status; echo x >> /etc/passwd; echo rc=$?']);
      expect(o.stdout).toMatch(/^1000\n1000\nCapPrm:\s+0+\nCapEff:\s+0+\n/);
      expect(o.stdout, o.stdout + o.stderr).toMatch(/rc=[12]/);
      expect((await sb.run('id -u; cd /tmp && touch mine && stat -c %u mine')).stdout).toBe('1000\n1000\n');
      const asRoot = await sb.exec(['id', '-u'], { user: { uid: 0, gid: 0 } });
      expect(asRoot.stdout).toBe('0\n');
    } finally {
      await sb.destroy();
    }
  });
});

describe('diff and fork over idmapped layers (real owners, a range per sandbox)', () => {
  it('the agent submission and the branches are the same as over shifted layers', async () => {
    // the unshifted sources of the lowers above: debootstrap's tree and the repository layer
    const real = [await ensureDebianRootfs(CACHE_DIR), layerSrc!];
    const sb = await createSandbox({ lowerDirs: real, stateDir, idmapLowers: true, config: { workdir: '/work/repo' } }, { host });
    try {
      expect((await sb.exec(['stat', '-c', '%u:%g', '/etc/passwd', '/work/repo/hello.txt'])).stdout).toBe('0:0\n0:0\n');
      await sb.run('echo step1 >> hello.txt && rm gone.txt && echo new > added.txt');
      const [fork] = await forkSandbox(sb, 1);
      try {
        expect(fork!.state.idMap.uidStart).not.toBe(sb.state.idMap.uidStart);
        await fork!.run('echo only-fork >> hello.txt');
        const mine = await sb.diff();
        const theirs = await fork!.diff();
        for (const p of [mine, theirs]) {
          expect(p).toContain('+step1');
          expect(p).toContain('deleted file mode');
          expect(p).toContain('+++ b/added.txt');
        }
        expect(theirs).toContain('+only-fork');
        expect(mine).not.toContain('only-fork');
      } finally {
        await fork!.destroy();
      }
    } finally {
      await sb.destroy();
    }
  });
});
