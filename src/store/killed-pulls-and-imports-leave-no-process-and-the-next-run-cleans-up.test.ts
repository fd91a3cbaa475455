/**
 * No orphans (issue 14): `kill -9` of a pull left its lay-out helper waiting on its own pipe for
 * minutes, holding the staging dir. Now every process of the pull dies with it, and the next pull
 * removes what the killed one left (its staging dir, its half laid-out tree); the next import
 * removes the extractions of dead imports, never those of live ones, and so every leftover named
 * after a dead process (a push's spool, a tar upload's), one whose pid a later process took included.
 */
import { execFile, spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestHex } from '../cas/digest.js';
import { LocalRegistry } from '../registry/local.js';
import { resolveEnv } from '../registry/resolve-env.js';
import { eventually } from '../../test/helpers/eventually.js';
import { ownerOfName } from '../util/owned-name.js';
import { processStartTime } from '../util/process.js';

const run = promisify(execFile);
const CLI = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
let work: string;

function cliArgs(store: string, args: string[]): string[] {
  return ['--registry', join(work, 'reg'), '--store', store, ...args];
}

async function cli(store: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(CLI, cliArgs(store, args), { cwd: work, timeout: 120_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof x.code === 'number' ? x.code : -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

/** Processes whose command line names `needle`, with their parents. */
function processesNaming(needle: string): Array<{ pid: number; ppid: number; cmd: string }> {
  const out: Array<{ pid: number; ppid: number; cmd: string }> = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`).toString().replaceAll('\0', ' ');
      if (!cmd.includes(needle)) continue;
      const ppid = Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, 'utf8'))?.[1]);
      out.push({ pid: Number(name), ppid, cmd });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** A pid no process has now (a child that ran and was reaped). */
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await new Promise((r) => child.on('close', r));
  return child.pid!;
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('this test runs as root');
  work = await mkdtemp(join(tmpdir(), 'msb-orphans-'));
  chmodSync(work, 0o755);
  const tree = join(work, 'tree');
  mkdirSync(join(tree, 'bin'), { recursive: true });
  copyFileSync('/bin/busybox', join(tree, 'bin/busybox'));
  symlinkSync('busybox', join(tree, 'bin/sh'));
  const r = await cli(join(work, 'import-store'), ['import', tree, '--tag', 'o/tree']);
  expect(r.code, r.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe('a pull killed with SIGKILL', () => {
  it('leaves no process behind, and the next pull removes its staging dir and half laid-out tree', async () => {
    const store = join(work, 'store');
    // The pack becomes a FIFO no one writes: the pull stalls with its helper started, whatever the machine's speed.
    const reg = new LocalRegistry(join(work, 'reg'));
    const pack = join(reg.root, 'blobs', 'sha256', digestHex((await resolveEnv(reg, 'o/tree')).config.layers[0]!.packs[0]!.pack));
    renameSync(pack, `${pack}.aside`);
    await run('mkfifo', [pack]);
    const pull = spawn(CLI, cliArgs(store, ['pull', 'o/tree']), { cwd: work, stdio: 'ignore' });
    const closed = new Promise((r) => pull.on('close', r));
    try {
      const layOutHelpers = () => processesNaming(store).filter((p) => p.cmd.includes('fsmeta') && p.cmd.includes('/layers/.tmp-'));
      await eventually(() => layOutHelpers().length > 0);
      const helpers = layOutHelpers();
      expect(helpers.length, 'the pull started its lay-out helper').toBeGreaterThan(0);
      const puller = helpers[0]!.ppid;
      expect(readFileSync(`/proc/${puller}/cmdline`).toString()).toContain('pull');
      process.kill(puller, 'SIGKILL');
      await eventually(() => processesNaming(store).length === 0);
      expect(processesNaming(store)).toEqual([]);
      await closed;
      const staged = (await readdir(join(store, 'tmp'))).filter((n) => ownerOfName(n, 'stage-')?.pid === puller);
      const halfTrees = (await readdir(join(store, 'layers'))).filter((n) => ownerOfName(n, '.tmp-')?.pid === puller);
      expect(staged.length + halfTrees.length, 'the killed pull left work behind').toBeGreaterThan(0);
    } finally {
      pull.kill('SIGKILL');
      rmSync(pack, { force: true });
      renameSync(`${pack}.aside`, pack);
    }
    const again = await cli(store, ['pull', 'o/tree']);
    expect(again.code, again.stderr).toBe(0);
    expect((await readdir(join(store, 'tmp'))).filter((n) => n.startsWith('stage-'))).toEqual([]);
    expect((await readdir(join(store, 'layers'))).filter((n) => n.startsWith('.tmp-'))).toEqual([]);
  }, 180_000);
});

describe('an import', () => {
  it('removes the extractions of dead imports, not those of live ones, and its own when the tarball is bad', async () => {
    const store = join(work, 'import-store');
    const dead = join(store, 'tmp', `import-${await deadPid()}-abc`);
    const live = join(store, 'tmp', `import-${process.pid}-def`);
    mkdirSync(join(dead, 'usr'), { recursive: true });
    mkdirSync(live, { recursive: true });
    // named as today's code names them, with the owner's start time: a dead push's spool and tar
    // upload's, one of a process that had our pid before us (another start time), and ours
    const me = `${process.pid}.${processStartTime(process.pid)}`;
    const deadOnes = [`push-${await deadPid()}.123-aa`, `tar-upload-${await deadPid()}.123-bb`, `push-${process.pid}.1-cc`, `copy-${await deadPid()}.9-dd`];
    const liveOnes = [`push-${me}-ee`, `tar-upload-${me}-ff`, `trash-${process.ppid}.${processStartTime(process.ppid)}-gg`];
    for (const n of [...deadOnes, ...liveOnes]) mkdirSync(join(store, 'tmp', n, 'sub'), { recursive: true });
    const tarball = join(work, 'tree.tar');
    await run('tar', ['-cf', tarball, '-C', join(work, 'tree'), '.']);
    const r = await cli(store, ['import', tarball, '--tag', 'o/tar']);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(dead)).toBe(false);
    expect(existsSync(live)).toBe(true);
    expect(deadOnes.filter((n) => existsSync(join(store, 'tmp', n)))).toEqual([]);
    expect(liveOnes.filter((n) => existsSync(join(store, 'tmp', n)))).toEqual(liveOnes);
    rmSync(live, { recursive: true });
    for (const n of liveOnes) rmSync(join(store, 'tmp', n), { recursive: true });
    const bad = join(work, 'bad.tar');
    await run('sh', ['-c', `head -c 100000 /dev/urandom > ${bad}`]);
    expect((await cli(store, ['import', bad, '--tag', 'o/bad'])).code).toBe(2);
    expect((await readdir(join(store, 'tmp'))).filter((n) => n.startsWith('import-'))).toEqual([]);
  }, 180_000);
});
