/**
 * Command lines for the holder (which creates a sandbox's namespaces and mounts and keeps them) and
 * for entering a sandbox (every exec and session). Pure: the caller spawns them.
 *
 * Chain, as measured (DESIGN.md): util-linux `unshare` makes the user (subordinate ids only) and
 * mount namespaces; a host shell inside mounts the size-capped tmpfs and the overlay; bubblewrap in
 * privileged mode then adds pid/ipc/uts(/net) namespaces, /proc, /dev, the pivot, no_new_privs and
 * the capability drop, and runs a tiny pid-1 payload that lives until its stdin (a pipe from the
 * runtime) closes. Entering = `nsenter` into the holder's user+mount namespaces and the sandbox's
 * net/ipc/uts, then bubblewrap again over the same merged root with a fresh pid namespace nested
 * in the sandbox's, so one SIGKILL to that bubblewrap ends the command's whole process tree.
 */
import type { IdMap } from './subid.js';

/** PATH for the host-side tools of the chain (prlimit, nsenter, unshare, bwrap, tar). */
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
}

export function rlimitArgs(r: Rlimits): string[] {
  const out = [`--nofile=${r.nofile}:${r.nofile}`, `--core=${r.core}:${r.core}`];
  if (r.nproc !== undefined) out.push(`--nproc=${r.nproc}:${r.nproc}`);
  if (r.asBytes !== undefined) out.push(`--as=${r.asBytes}:${r.asBytes}`);
  return out;
}

/** Prefix that puts the process into the cgroups (by writing its own pid) before anything runs. */
export function cgroupWrapArgs(procsFiles: string[]): string[] {
  if (procsFiles.length === 0) return [];
  const script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"';
  return ['/bin/sh', '-c', script, 'msb-cg', String(procsFiles.length), ...procsFiles];
}

export interface HolderSpec {
  idMap: IdMap;
  /** Host dir for upper+work (a tmpfs is mounted on it when tmpfsBytes is set). */
  upperDir: string;
  mergedDir: string;
  lowerDirs: string[];
  tmpfsBytes: number | undefined;
  network: 'none' | 'host';
  hostname: string;
  workdir: string;
  /** Read a tar of a source upper dir from fd 4 before mounting (fork). */
  fromTar: boolean;
  rlimits: Rlimits;
  cgroupProcs: string[];
}

/**
 * What root inside a build or task sandbox needs to install packages (apt drops to its _apt user,
 * dpkg chowns files): the set rootless podman keeps by default. All are confined to the sandbox's
 * user namespace and to files it owns.
 */
export const DEFAULT_CAPS = ['CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FOWNER', 'CAP_FSETID', 'CAP_KILL', 'CAP_SETGID', 'CAP_SETUID', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_SETFCAP'] as const;

// Runs as the namespace's root on the host's filesystem (before the pivot): only host-controlled
// paths are touched, except the three mount destinations, which are replaced if the layer planted
// a symlink or a file there so that no mount can be redirected.
const HOLDER_SCRIPT = `set -e
up=$1 merged=$2 lower=$3 size=$4 fromtar=$5; shift 5
if [ -n "$size" ]; then mount -t tmpfs -o "size=$size,mode=755" msb-upper "$up"; fi
mkdir -p "$up/u" "$up/w"
if [ "$fromtar" = 1 ]; then tar -C "$up/u" --xattrs --xattrs-include='user.*' --numeric-owner -xpf - <&4; fi
exec 4<&-
mount -t overlay msb-root -o "lowerdir=$lower,upperdir=$up/u,workdir=$up/w,userxattr" "$merged"
for d in proc dev tmp; do
  if [ -L "$merged/$d" ] || { [ -e "$merged/$d" ] && [ ! -d "$merged/$d" ]; }; then rm -f "$merged/$d"; fi
  if [ ! -e "$merged/$d" ]; then mkdir "$merged/$d"; if [ "$d" = tmp ]; then chmod 1777 "$merged/$d"; fi; fi
done
exec "$@"`;

// pid 1's payload, inside the sandbox: make the workdir, say ready, live until the runtime's pipe closes.
const PAYLOAD_SCRIPT = '[ "$1" = / ] || mkdir -p -- "$1" 2>/dev/null; echo ready; read -r _ || :';

export function overlayLowerOption(lowerDirs: string[]): string {
  // overlayfs lists the top layer first; ours come lowest first.
  return [...lowerDirs].reverse().join(':');
}

export function holderCommand(s: HolderSpec): string[] {
  const { idMap } = s;
  const bwrap = [
    'bwrap',
    '--info-fd', '3',
    '--bind', s.mergedDir, '/',
    '--proc', '/proc',
    '--dev', '/dev',
    '--unshare-pid', '--unshare-ipc', '--unshare-uts',
    ...(s.network === 'none' ? ['--unshare-net'] : []),
    '--hostname', s.hostname,
    '--cap-drop', 'ALL',
    '--die-with-parent',
    '--clearenv', '--setenv', 'PATH', DEFAULT_PATH,
    '--', '/bin/sh', '-c', PAYLOAD_SCRIPT, 'msb-init', s.workdir,
  ];
  return [
    'prlimit', ...rlimitArgs(s.rlimits), '--',
    ...cgroupWrapArgs(s.cgroupProcs),
    'unshare', '--user',
    `--map-users=${idMap.uidStart},0,${idMap.count}`,
    `--map-groups=${idMap.gidStart},0,${idMap.count}`,
    '--setuid', '0', '--setgid', '0',
    '--mount', '--propagation', 'private',
    '--', '/bin/sh', '-c', HOLDER_SCRIPT, 'msb-holder',
    s.upperDir, s.mergedDir, overlayLowerOption(s.lowerDirs), s.tmpfsBytes === undefined ? '' : String(s.tmpfsBytes), s.fromTar ? '1' : '0',
    ...bwrap,
  ];
}

export interface EnterSpec {
  holderPid: number;
  initPid: number;
  mergedDir: string;
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
}

/** fd numbers the spawner must provide: 3 = bwrap's JSON status pipe, 4 = the sandbox's pid namespace. */
export const ENTER_STATUS_FD = 3;
export const ENTER_PIDNS_FD = 4;

export function enterCommand(s: EnterSpec): string[] {
  const env: string[] = [];
  for (const [k, v] of Object.entries({ PATH: DEFAULT_PATH, HOME: '/root', ...s.env })) env.push('--setenv', k, v);
  return [
    'prlimit', ...rlimitArgs(s.rlimits), '--',
    ...cgroupWrapArgs(s.cgroupProcs),
    'nsenter', `--target=${s.holderPid}`, '--user', '--mount',
    ...(s.network === 'none' ? [`--net=/proc/${s.initPid}/ns/net`] : []),
    `--ipc=/proc/${s.initPid}/ns/ipc`, `--uts=/proc/${s.initPid}/ns/uts`,
    '--',
    'bwrap',
    '--pidns', String(ENTER_PIDNS_FD), '--unshare-pid',
    '--json-status-fd', String(ENTER_STATUS_FD),
    '--bind', s.mergedDir, '/',
    '--proc', '/proc',
    '--dev', '/dev',
    '--cap-drop', 'ALL',
    ...capsFor(s).flatMap((c) => ['--cap-add', c]),
    '--die-with-parent',
    '--new-session',
    '--clearenv', ...env,
    '--', ...withWorkdir(s.workdir, asUser(s.user, s.argv)),
  ];
}

function isRootUser(user: EnterSpec['user']): boolean {
  return user === undefined || (user.uid === 0 && user.gid === 0);
}

function capsFor(s: EnterSpec): readonly string[] {
  // Switching to a non-root user needs these two for the switch itself; the kernel clears every
  // capability when the uid leaves 0, and no_new_privs keeps it that way.
  return isRootUser(s.user) ? s.caps : [...new Set([...s.caps, 'CAP_SETUID', 'CAP_SETGID'])];
}

/** Runs argv as a non-root in-sandbox user through the image's util-linux `setpriv`. */
function asUser(user: EnterSpec['user'], argv: string[]): string[] {
  if (user === undefined || isRootUser(user)) return argv;
  return ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', '--inh-caps=-all', '--', ...argv];
}

export const WORKDIR_FAILURE = 'minisandbox: cannot enter workdir';

/**
 * Enters the workdir from inside the sandbox. (bwrap's own --chdir, when it fails after joining a
 * pid namespace with --pidns, leaves bwrap 0.8 hanging; a shell `cd` fails cleanly.)
 */
function withWorkdir(workdir: string, argv: string[]): string[] {
  if (workdir === '/') return argv;
  return ['/bin/sh', '-c', `cd -- "$1" 2>/dev/null || { echo "${WORKDIR_FAILURE} $1" >&2; exit 125; }; shift; exec "$@"`, 'msb-cd', workdir, ...argv];
}

export function forkSourceTarCommand(holderPid: number, upperDir: string): string[] {
  return ['nsenter', `--target=${holderPid}`, '--user', '--mount', '--', 'tar', '-C', `${upperDir}/u`, '--xattrs', "--xattrs-include=user.*", '--numeric-owner', '-cpf', '-', '.'];
}
