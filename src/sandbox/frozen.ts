/**
 * Frozen uppers: a running sandbox's upper dir copied once into a read-only dir beside the
 * sandboxes (`<stateDir>/.fork-<id>-<hex>`), which every child of a fork mounts as its top lower
 * layer under an empty upper of its own. Fork x N then reads the parent's writes once, not N times,
 * and a child's start copies nothing. The copy keeps overlayfs' whiteouts and opaque dirs, which
 * overlayfs honours in lower layers too, so the child sees exactly the parent's tree.
 *
 * A frozen dir lives while a sandbox in this process mounts it (counted here; a child's own
 * fork or reset keeps the count right) and is removed in the background after the last one.
 * The leading dot keeps it out of the sandbox listing and its reaper.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { asSubordinateRoot } from '../host/userns.js';
import { chownSync, mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { FROZEN_PREFIX, isFrozenLower } from './frozen-name.js';
import type { IdMap } from '../host/subid.js';
import { forkSourceTarCommand, HOST_PATH } from './commands.js';
import { freezeSandbox } from './freeze.js';
import { MinisandboxError } from '../errors.js';
import { randomHex } from '../util/lazy-crypto.js';
import { removeTree, type SandboxState } from './state.js';

const holders = new Map<string, number>();

/** Counts one more sandbox over each frozen dir among `dirs`. */
export function retainFrozenLowers(dirs: string[]): void {
  for (const d of dirs) if (isFrozenLower(d)) holders.set(d, (holders.get(d) ?? 0) + 1);
}

/** One sandbox fewer over each frozen dir among `dirs`; the last one out removes it (settled when the promise is). */
export function releaseFrozenLowers(dirs: string[], idMap: IdMap): Promise<void> {
  const removals: Promise<void>[] = [];
  for (const d of dirs) {
    if (!isFrozenLower(d)) continue;
    const n = (holders.get(d) ?? 1) - 1;
    if (n > 0) {
      holders.set(d, n);
      continue;
    }
    holders.delete(d);
    removals.push(removeTree(d, idMap).catch(() => undefined));
  }
  return Promise.all(removals).then(() => undefined);
}

/**
 * Copies the sandbox's upper dir (read inside its namespaces by GNU tar, which walks relative to
 * directory fds and follows no symlink, with its processes held so the copy is one moment's
 * state) into a new frozen dir, and returns that dir. Over idmapped layers the copy holds the
 * in-sandbox owners as they are (like every real-owner layer); otherwise it is written from
 * inside the sandbox's user namespace, so its owners come out shifted like the shifted layers'.
 */
export async function freezeUpper(stateDir: string, state: SandboxState, isRoot: boolean): Promise<string> {
  const dir = join(stateDir, `${FROZEN_PREFIX}${state.id}-${randomHex(6)}`);
  const idmapped = state.idmapLowers === true;
  mkdirSync(dir, { mode: 0o755 });
  if (!idmapped) {
    // the sandbox's root must own it, so that tar in its user namespace can give it the upper's owner, mode and times
    if (isRoot) chownSync(dir, state.idMap.uidStart, state.idMap.gidStart);
    else await runArgv(await asSubordinateRoot(state.idMap, ['chown', '0:0', dir]));
  }
  // tar starts in the new dir (nsenter keeps its working directory), so in the sandbox's user
  // namespace its ids need not reach the store above it
  const extract = ['tar', '--xattrs', '--xattrs-include=user.*', '--numeric-owner', '-xpf', '-'];
  const dst = idmapped ? extract : ['nsenter', `--target=${state.holderPid}`, '--user', '--', ...extract];
  const src = forkSourceTarCommand(state.holderPid, state.upperDir);
  const thaw = await freezeSandbox(state);
  try {
    await pipeCommands(src, dst, dir);
  } catch (e) {
    await removeTree(dir, state.idMap).catch(() => undefined);
    throw e;
  } finally {
    thaw();
  }
  return dir;
}

async function runArgv(argv: string[]): Promise<void> {
  try {
    await promisify(execFile)(argv[0]!, argv.slice(1), { env: { PATH: HOST_PATH } });
  } catch (e) {
    throw new MinisandboxError(
      'SANDBOX_START',
      `fork: cannot hand the frozen copy to the sandbox's ids: ${String((e as { stderr?: string }).stderr ?? e).trim()}`,
      {
        hint: "check this user's subordinate id ranges (/etc/subuid, /etc/subgid)",
      },
    );
  }
}

/** `a | b` (the pipe handed from one to the other, never read here; b in `bDir`), failing with either's stderr. */
async function pipeCommands(a: string[], b: string[], bDir: string): Promise<void> {
  const opts = { env: { PATH: HOST_PATH } };
  const pa = spawn(a[0]!, a.slice(1), { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  const pb = spawn(b[0]!, b.slice(1), { ...opts, cwd: bDir, stdio: [pa.stdout, 'ignore', 'pipe'] });
  // b holds its end now: ours would only keep the pipe open
  pa.stdout.destroy();
  const done = (p: ChildProcess): Promise<{ code: number | null; err: string }> =>
    new Promise((resolve) => {
      let err = '';
      p.stderr!.on('data', (c: Buffer) => void (err.length < 4096 && (err += c.toString('utf8'))));
      p.on('error', (e) => resolve({ code: null, err: String(e) }));
      p.on('close', (code) => resolve({ code, err }));
    });
  const [ra, rb] = await Promise.all([done(pa), done(pb)]);
  if (ra.code !== 0 || rb.code !== 0) {
    throw new MinisandboxError(
      'SANDBOX_START',
      `fork: copying the source sandbox's upper dir failed: ${`${ra.err} ${rb.err}`.trim() || `exit ${ra.code}/${rb.code}`}`,
      {
        hint: 'the source sandbox must be alive during the fork',
      },
    );
  }
}
