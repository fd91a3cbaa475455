/**
 * Per-sandbox cgroups for memory, pids and CPU limits, and for holding a sandbox still (the
 * freezer: snapshot, fork). Supports cgroup v2 (`cgroup.freeze` in the sandbox's group) and the
 * v1 controllers of hybrid hosts (a group in the `freezer` hierarchy); where no group is writable
 * (rootless without delegation) the caller falls back to rlimits and warns, and the hold to its
 * SIGSTOP sweep (freeze.ts).
 */
import { appendFile, mkdir, readFile, rmdir, stat, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isErrno } from '../util/fs.js';

export interface CgroupLimits {
  memoryBytes?: number | undefined;
  pids?: number | undefined;
  /** CPU bandwidth in cores (e.g. 1.5). */
  cpus?: number | undefined;
}

/** Where a sandbox's processes are frozen and thawed as one. */
export interface Freezer {
  version: 1 | 2;
  /** The group: v1 `freezer.state`, v2 `cgroup.freeze` and `cgroup.events` are in it. */
  dir: string;
}

export interface ProcCgroupLine {
  hierarchy: number;
  controllers: string[];
  path: string;
}

export function parseProcCgroup(text: string): ProcCgroupLine[] {
  const out: ProcCgroupLine[] = [];
  for (const line of text.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (m === null) continue;
    out.push({ hierarchy: Number(m[1]), controllers: m[2] === '' ? [] : m[2]!.split(','), path: m[3]! });
  }
  return out;
}

/** A sandbox's groups: one dir for v2, one per controller for v1. */
export interface SandboxCgroup {
  version: 1 | 2;
  /** Every directory created (removal order: as listed). */
  dirs: string[];
  /** `cgroup.procs` files a process must be written to so that all limits apply to it. */
  procsFiles: string[];
  /** File whose `oom_kill N` counter tells whether the memory limit killed something. */
  oomFile: string | undefined;
  /** Limits that could not be applied through cgroups. */
  unenforced: (keyof CgroupLimits)[];
  /** Its freezer, when one was asked for and could be made. */
  freezer?: Freezer | undefined;
}

const CG_ROOT = '/sys/fs/cgroup';

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Creates the sandbox's groups and writes its limits; with `freezer`, also (even without limits) a
 * group every process of the sandbox joins and can be frozen in. Returns undefined when nothing
 * was asked or nothing is writable (the caller warns and uses rlimits for the limits; a sandbox
 * without a freezer is held by the SIGSTOP sweep).
 */
export async function createSandboxCgroup(
  name: string,
  limits: CgroupLimits,
  opts: { freezer?: boolean; root?: string } = {},
): Promise<SandboxCgroup | undefined> {
  const root = opts.root ?? CG_ROOT;
  const wanted = (Object.keys(limits) as (keyof CgroupLimits)[]).filter((k) => limits[k] !== undefined);
  const freezer = opts.freezer === true;
  if (wanted.length === 0 && !freezer) return undefined;
  const self = parseProcCgroup(await readFile('/proc/self/cgroup', 'utf8'));
  if (await exists(join(root, 'cgroup.controllers'))) return createV2(name, limits, wanted, self, root);
  return createV1(name, limits, wanted, self, root, freezer);
}

/** A v1 group in the freezer hierarchy, beside this process's own; undefined where there is none or it is not writable. */
async function createV1Freezer(name: string, self: ProcCgroupLine[], root: string): Promise<string | undefined> {
  const line = self.find((l) => l.controllers.includes('freezer'));
  const mount = join(root, 'freezer');
  if (line === undefined || !(await exists(join(mount, 'cgroup.procs')))) return undefined;
  const dir = join(mount, line.path, name);
  try {
    await mkdir(dir);
  } catch (e) {
    if (!isErrno(e, 'EEXIST')) return undefined;
  }
  if (await exists(join(dir, 'freezer.state'))) return dir;
  await rmdir(dir).catch(() => undefined);
  return undefined;
}

async function tryWrite(file: string, value: string): Promise<boolean> {
  try {
    await writeFile(file, value);
    return true;
  } catch {
    return false;
  }
}

async function createV1(
  name: string,
  limits: CgroupLimits,
  wanted: (keyof CgroupLimits)[],
  self: ProcCgroupLine[],
  root: string,
  freezer: boolean,
): Promise<SandboxCgroup | undefined> {
  const controllerOf: Record<keyof CgroupLimits, string> = { memoryBytes: 'memory', pids: 'pids', cpus: 'cpu' };
  const cg: SandboxCgroup = { version: 1, dirs: [], procsFiles: [], oomFile: undefined, unenforced: [] };
  for (const key of wanted) {
    const controller = controllerOf[key];
    const line = self.find((l) => l.controllers.includes(controller));
    const mount = join(root, controller);
    if (line === undefined || !(await exists(join(mount, 'cgroup.procs')))) {
      cg.unenforced.push(key);
      continue;
    }
    const dir = join(mount, line.path, name);
    try {
      await mkdir(dir);
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) {
        cg.unenforced.push(key);
        continue;
      }
    }
    cg.dirs.push(dir);
    cg.procsFiles.push(join(dir, 'cgroup.procs'));
    let ok: boolean;
    if (key === 'memoryBytes') {
      ok = await tryWrite(join(dir, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      // Without a swap cap the hog would page out instead of being killed (where swap exists).
      await tryWrite(join(dir, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
      cg.oomFile = join(dir, 'memory.oom_control');
    } else if (key === 'pids') {
      ok = await tryWrite(join(dir, 'pids.max'), String(limits.pids));
    } else {
      ok =
        (await tryWrite(join(dir, 'cpu.cfs_period_us'), '100000')) &&
        (await tryWrite(join(dir, 'cpu.cfs_quota_us'), String(Math.max(1000, Math.round((limits.cpus ?? 1) * 100000)))));
    }
    if (!ok) cg.unenforced.push(key);
  }
  const frozen = freezer ? await createV1Freezer(name, self, root) : undefined;
  if (frozen !== undefined) {
    cg.dirs.push(frozen);
    cg.procsFiles.push(join(frozen, 'cgroup.procs'));
    cg.freezer = { version: 1, dir: frozen };
  }
  if (cg.dirs.length === 0) return undefined;
  return cg;
}

async function createV2(
  name: string,
  limits: CgroupLimits,
  wanted: (keyof CgroupLimits)[],
  self: ProcCgroupLine[],
  root: string,
): Promise<SandboxCgroup | undefined> {
  const line = self.find((l) => l.hierarchy === 0);
  if (line === undefined) return undefined;
  // A v2 group with processes cannot enable controllers for children ("no internal processes"):
  // put sandboxes beside ourselves, under our parent, which is what delegation usually grants.
  const here = join(root, line.path);
  const parent = join(here, '..');
  const enable = wanted.map((k) => ({ memoryBytes: '+memory', pids: '+pids', cpus: '+cpu' })[k]).join(' ');
  // a group for the freezer alone needs no controllers: cgroup.freeze is in every non-root group
  const enabled = async (dir: string): Promise<boolean> => enable === '' || tryWrite(join(dir, 'cgroup.subtree_control'), enable);
  let dir: string | undefined;
  for (const base of [parent, here]) {
    if (!(await enabled(base))) continue;
    try {
      await mkdir(join(base, name));
    } catch (e) {
      if (!isErrno(e, 'EEXIST')) continue;
    }
    dir = join(base, name);
    break;
  }
  if (dir === undefined) return undefined;
  const cg: SandboxCgroup = {
    version: 2,
    dirs: [dir],
    procsFiles: [join(dir, 'cgroup.procs')],
    oomFile: join(dir, 'memory.events'),
    unenforced: [],
    ...((await exists(join(dir, 'cgroup.freeze'))) ? { freezer: { version: 2 as const, dir } } : {}),
  };
  for (const key of wanted) {
    let ok: boolean;
    if (key === 'memoryBytes') {
      ok = await tryWrite(join(dir, 'memory.max'), String(limits.memoryBytes));
      await tryWrite(join(dir, 'memory.swap.max'), '0');
    } else if (key === 'pids') ok = await tryWrite(join(dir, 'pids.max'), String(limits.pids));
    else ok = await tryWrite(join(dir, 'cpu.max'), `${Math.max(1000, Math.round((limits.cpus ?? 1) * 100000))} 100000`);
    if (!ok) cg.unenforced.push(key);
  }
  return cg;
}

/**
 * The group's count of OOM kills so far (0 when unknown). Read synchronously: a cgroup file is
 * kernel memory, never disk, and this runs twice per command; an async read is four thread-pool
 * round trips and event-loop callbacks each, which a server running many commands pays for in
 * latency on every other request.
 */
export async function oomKills(oomFile: string | undefined): Promise<number> {
  if (oomFile === undefined) return 0;
  try {
    const m = /^oom_kill (\d+)$/m.exec(readFileSync(oomFile, 'utf8'));
    return m === null ? 0 : Number(m[1]);
  } catch {
    return 0;
  }
}

/** Process ids in a group (any of its dirs). */
export async function cgroupPids(dirs: string[]): Promise<number[]> {
  const out = new Set<number>();
  for (const d of dirs) {
    try {
      for (const l of (await readFile(join(d, 'cgroup.procs'), 'utf8')).split('\n')) if (l.trim() !== '') out.add(Number(l));
    } catch {
      // group already gone
    }
  }
  return [...out];
}

/** Lifts the CPU quota so that dying processes are not throttled on their way out. */
export async function unthrottle(dirs: string[]): Promise<void> {
  for (const d of dirs) {
    await tryWrite(join(d, 'cpu.cfs_quota_us'), '-1');
    await tryWrite(join(d, 'cpu.max'), 'max');
  }
}

/**
 * SIGKILLs every process in the groups, then thaws them: a frozen process dies only once it runs
 * again (v1 holds even a SIGKILL until the thaw), and killed first it runs no code of its own on
 * the way. Idempotent.
 */
export async function killAndThaw(dirs: string[]): Promise<void> {
  for (const p of await cgroupPids(dirs)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone or not ours
    }
  }
  for (const d of dirs) {
    await tryWrite(join(d, 'freezer.state'), 'THAWED');
    await tryWrite(join(d, 'cgroup.freeze'), '0');
  }
}

/** Kills whatever is left in the groups and removes them. Idempotent. */
export async function removeCgroup(dirs: string[]): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    await killAndThaw(dirs);
    let left = 0;
    for (const d of dirs) {
      try {
        await rmdir(d);
      } catch (e) {
        if (!isErrno(e, 'ENOENT')) left++;
      }
    }
    if (left === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Moves a process into the groups (used for processes not started through the wrapper). */
export async function addToCgroup(procsFiles: string[], pid: number): Promise<void> {
  for (const f of procsFiles) await appendFile(f, `${pid}\n`);
}
