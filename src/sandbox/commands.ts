/**
 * Command lines for the holder (which creates a sandbox's namespaces and mounts and keeps them) and
 * for entering a sandbox (every exec and session). Pure: the caller spawns them.
 *
 * Both run native/sandbox-launch.c, one process each (see there for the exact sequence): the
 * holder makes the user namespace (subordinate ids only), a mount namespace with the size-capped
 * tmpfs upper and the overlay, and the sandbox's init in new pid/ipc/uts(/net) namespaces with
 * /proc, a minimal /dev, the pivot, no capabilities and no_new_privs; init lives until its stdin
 * (a pipe from the runtime) closes. Entering joins those namespaces and runs the command in a
 * fresh pid namespace nested in the sandbox's, so one SIGKILL to its pid 1 ends the whole tree.
 * A one-shot sandbox (`run`, see run-once.ts) is both in one process chain: the holder's steps, then
 * the command as its init's child, ended with it.
 * The util-linux + bubblewrap chain this replaced ran eleven programs per start (ARCHITECTURE.md, measured facts).
 */
import { basename } from 'node:path';
import type { IdMap } from '../host/subid.js';
import { bindArgs, type ResolvedBindMount } from './bind-mounts.js';
import { ownLowerCount } from './frozen-name.js';

/** PATH for the host-side tools of the chain (newuidmap, tar, nsenter). */
export const HOST_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface Rlimits {
  nofile: number;
  /**
   * RLIMIT_NPROC: counted per uid per user namespace (kernel >= 5.14), so per sandbox here; older
   * kernels count per host uid, shared by all sandboxes of one id map.
   */
  nproc?: number | undefined;
  /** RLIMIT_AS, only as a fallback when no memory cgroup is writable. */
  asBytes?: number | undefined;
  core: number;
  /** Not an rlimit but set with them: the scheduling niceness (0-19) of every process. */
  nice?: number | undefined;
}

/** The launcher sets these on itself first, so everything it starts inherits them. */
export function rlimitArgs(r: Rlimits): string[] {
  const nice = r.nice === undefined || r.nice === 0 ? [] : ['--nice', String(r.nice)];
  const limits: [string, number][] = [
    ['nofile', r.nofile],
    ['core', r.core],
  ];
  if (r.nproc !== undefined) limits.push(['nproc', r.nproc]);
  if (r.asBytes !== undefined) limits.push(['as', r.asBytes]);
  return [...limits.flatMap(([name, v]) => ['--rlimit', `${name}=${v}:${v}`]), ...nice];
}

/** The launcher writes its own pid into these cgroup.procs / tasks files before anything else. */
export function cgroupArgs(procsFiles: string[]): string[] {
  return procsFiles.flatMap((f) => ['--cgroup', f]);
}

export interface HolderSpec {
  /** The compiled native/sandbox-launch. */
  launcher: string;
  idMap: IdMap;
  /** Mount the lower dirs idmapped through the sandbox's user namespace (they hold real owners). */
  idmapLowers?: boolean;
  /** Host dir for upper+work (a tmpfs is mounted on it when tmpfsBytes is set). */
  upperDir: string;
  mergedDir: string;
  lowerDirs: string[];
  tmpfsBytes: number | undefined;
  /** Mount the overlay `volatile`: no syncs reach the upper dir. */
  volatileUpper: boolean;
  network: 'none' | 'host';
  hostname: string;
  workdir: string;
  /** Read a tar of a source upper dir from fd FORK_TAR_FD before mounting (fork). */
  fromTar: boolean;
  rlimits: Rlimits;
  cgroupProcs: string[];
  /** Host paths bind-mounted into the sandbox (bind-mounts.ts). */
  binds?: readonly ResolvedBindMount[] | undefined;
}

/**
 * What root inside a build or task sandbox needs to install packages (apt drops to its _apt user,
 * dpkg chowns files): the set rootless podman keeps by default. All are confined to the sandbox's
 * user namespace and to files it owns.
 */
export const DEFAULT_CAPS = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_SETFCAP',
] as const;

/** fd numbers the holder's spawner provides: its {"child-pid"} report, and the fork's tar stream. */
export const HOLDER_INFO_FD = 3;
export const FORK_TAR_FD = 4;

export function overlayLowerOption(lowerDirs: string[]): string {
  // overlayfs lists the top layer first; ours come lowest first.
  return [...lowerDirs].reverse().join(':');
}

/** The launcher command line of a holder, spawned directly (forks). */
export function holderCommand(s: HolderSpec): string[] {
  return [s.launcher, 'holder', ...holderArgs(s)];
}

/** The arguments of `sandbox-launch holder` (also what the launcher server takes to start one). */
export function holderArgs(s: HolderSpec): string[] {
  return [...sandboxArgs(s), ...(s.fromTar ? ['--from-tar-fd', String(FORK_TAR_FD)] : []), '--info-fd', String(HOLDER_INFO_FD)];
}

/** What `holder` and `run` take to make a sandbox: limits, ids, the overlay, network, hostname. */
function sandboxArgs(s: Omit<HolderSpec, 'launcher' | 'fromTar'>): string[] {
  const { idMap } = s;
  const own = ownLowerCount(s.lowerDirs);
  return [
    ...rlimitArgs(s.rlimits),
    ...cgroupArgs(s.cgroupProcs),
    '--uid-map',
    `${idMap.uidStart}:${idMap.count}`,
    '--gid-map',
    `${idMap.gidStart}:${idMap.count}`,
    '--upper',
    s.upperDir,
    '--merged',
    s.mergedDir,
    '--lower',
    overlayLowerOption(s.lowerDirs),
    // the runtime's /etc files (hosts, hostname, resolv.conf) go below a fork's copies of its
    // parent's writes, above the environment's layers (see make_etc_layer in the launcher)
    ...(own > 0 ? ['--own-lowers', String(own)] : []),
    ...(s.tmpfsBytes === undefined ? [] : ['--tmpfs-size', String(s.tmpfsBytes)]),
    ...(s.volatileUpper ? ['--volatile', '1'] : []),
    ...(s.idmapLowers === true ? ['--idmap-lowers', '1'] : []),
    '--net',
    s.network,
    '--hostname',
    s.hostname,
    '--workdir',
    s.workdir,
    ...bindArgs(s.binds ?? []),
  ];
}

export interface EnterSpec {
  launcher: string;
  holderPid: number;
  initPid: number;
  network: 'none' | 'host';
  env: Record<string, string>;
  workdir: string;
  argv: string[];
  rlimits: Rlimits;
  cgroupProcs: string[];
  /** Capabilities kept inside the sandbox's user namespace (they grant nothing on the host). */
  caps: readonly string[];
  /** In-sandbox user to run as; undefined or 0:0 = the sandbox's root. */
  user?: { uid: number; gid: number } | undefined;
  /** The environment is `env` alone: no default PATH or HOME (as Python's subprocess.run(env=...)). */
  exactEnv?: boolean | undefined;
  /**
   * The command's stdio is a terminal of the sandbox's own, relayed to the launcher's stdin and
   * stdout, of this size; `echo: false` as a program driving it wants (pexpect's echo=False).
   */
  terminal?: { rows: number; cols: number; echo: boolean } | undefined;
}

/**
 * fd numbers the spawner must provide: 3 = the JSON status pipe ({"child-pid"}, then
 * {"exit-code"} once the command ran), 4 = the sandbox's pid namespace (opened by the runtime).
 */
export const ENTER_STATUS_FD = 3;
export const ENTER_PIDNS_FD = 4;

/** The launcher command line of a command, spawned directly (the interactive shell). */
export function enterCommand(s: EnterSpec): string[] {
  return [s.launcher, 'enter', ...enterArgs(s)];
}

/** The environment a command really gets: `env` over the runtime's PATH and HOME defaults. */
export function commandEnv(env: Record<string, string>, exact?: boolean): Record<string, string> {
  return exact === true ? env : { PATH: DEFAULT_PATH, HOME: '/root', ...env };
}

/** What a command gets besides its sandbox: kept caps, user, environment, and its argv last. */
function commandArgs(s: Pick<EnterSpec, 'caps' | 'user' | 'env' | 'argv' | 'exactEnv'>): string[] {
  const env: string[] = [];
  for (const [k, v] of Object.entries(commandEnv(s.env, s.exactEnv))) env.push('--env', `${k}=${v}`);
  const user = s.user === undefined || (s.user.uid === 0 && s.user.gid === 0) ? [] : ['--user', `${s.user.uid}:${s.user.gid}`];
  return [...s.caps.flatMap((c) => ['--cap', c]), ...user, ...env, '--', ...s.argv];
}

/** The arguments of `sandbox-launch enter` (also what the launcher server takes to run one). */
export function enterArgs(s: EnterSpec): string[] {
  return [
    ...rlimitArgs(s.rlimits),
    ...cgroupArgs(s.cgroupProcs),
    '--holder',
    String(s.holderPid),
    '--init',
    String(s.initPid),
    '--pidns-fd',
    String(ENTER_PIDNS_FD),
    '--status-fd',
    String(ENTER_STATUS_FD),
    '--net',
    s.network,
    '--workdir',
    s.workdir,
    ...(s.terminal === undefined ? [] : ['--pty', '1', '--pty-size', `${s.terminal.rows}:${s.terminal.cols}`, '--pty-echo', s.terminal.echo ? '1' : '0']),
    ...commandArgs(s),
  ];
}

/** fd number the spawner of `run` provides for the JSON status ({"child-pid"}, then {"exit-code"}). */
export const RUN_STATUS_FD = 3;

/**
 * The launcher command line of a one-shot sandbox (`sandbox-launch run`): a holder's sandbox with
 * one command in it, its workdir the command's, its rlimits the command's (the launcher sets
 * RLIMIT_NPROC only inside the user namespace, as a holder never sets it).
 */
export function runCommand(sandbox: Omit<HolderSpec, 'fromTar'>, command: Pick<EnterSpec, 'caps' | 'user' | 'env' | 'argv' | 'rlimits' | 'workdir'>): string[] {
  return [
    sandbox.launcher,
    'run',
    ...sandboxArgs({ ...sandbox, rlimits: command.rlimits, workdir: command.workdir }),
    '--status-fd',
    String(RUN_STATUS_FD),
    ...commandArgs(command),
  ];
}

/** How the launcher's own-run mode ends a run it owns (see run-in-place.ts). */
export interface OwnRunSpec {
  timeoutMs: number;
  /** The cgroup's memory.events, to tell an OOM kill from another SIGKILL. */
  oomFile: string | undefined;
  /** Teardown steps, in order; the first that fails leaves the rest to the next reap. */
  cleanup: Array<{ op: 'cgroup' | 'rmdir' | 'unlink'; path: string }>;
}

/**
 * The command line of `sandbox-launch own-run`: run's, with the end the CLI gives a one-shot run
 * (timeout, classification, teardown) done by the launcher, which a process execs in its place.
 */
export function ownRunCommand(
  sandbox: Omit<HolderSpec, 'fromTar'>,
  command: Pick<EnterSpec, 'caps' | 'user' | 'env' | 'argv' | 'rlimits' | 'workdir'>,
  own: OwnRunSpec,
): string[] {
  return [
    sandbox.launcher,
    'own-run',
    ...sandboxArgs({ ...sandbox, rlimits: command.rlimits, workdir: command.workdir }),
    '--timeout-ms',
    String(own.timeoutMs),
    ...(own.oomFile === undefined ? [] : ['--oom-events', own.oomFile]),
    ...own.cleanup.flatMap((c) => [`--cleanup-${c.op}`, c.path]),
    ...commandArgs(command),
  ];
}

/** Prefix of the message a command that could not enter its workdir fails with. */
export const WORKDIR_FAILURE = 'minisandbox: cannot enter workdir';

/**
 * The source's holder works from its sandbox dir (see the launcher's work_from_sandbox_dir): tar
 * starts there (nsenter opens the holder's working directory before it enters the namespaces), so
 * the sandbox's ids need not reach the store above it.
 */
export function forkSourceTarCommand(holderPid: number, upperDir: string): string[] {
  const from = ['--wd', '--', 'tar', '-C', `${basename(upperDir)}/u`];
  return ['nsenter', `--target=${holderPid}`, '--user', '--mount', ...from, '--xattrs', '--xattrs-include=user.*', '--numeric-owner', '-cpf', '-', '.'];
}
