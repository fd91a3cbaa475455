/**
 * Host git on a built instance's checkout as a sandbox sees it: the instance layer's /testbed,
 * with the history layer's /opt/minisandbox (the shared history store its alternates name) bound
 * where the sandbox has it, in a private mount namespace. For tests of layers whose base has no git.
 */
import { spawnSync } from 'node:child_process';

const GIT_ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' };
const UNSHARE = ['unshare', '--mount', '--propagation', 'private'];

/** `git -C <instance>/testbed ARGS` over `history`'s store; `input` is its stdin. */
export function gitInLayers(history: string, instance: string, args: string[], input?: string): { status: number | null; stdout: string; stderr: string } {
  const script =
    'mount -t tmpfs tmpfs /opt && mkdir -p /opt/minisandbox && mount --bind "$1/opt/minisandbox" /opt/minisandbox && shift && exec git -C "$0/testbed" "$@"';
  const r = spawnSync(UNSHARE[0]!, [...UNSHARE.slice(1), 'sh', '-c', script, instance, history, ...args], {
    encoding: 'utf8',
    env: GIT_ENV,
    maxBuffer: 1 << 26,
    ...(input === undefined ? {} : { input }),
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
