/**
 * Host capability probe: everything a sandbox needs from the machine, checked up front so a
 * missing piece fails with one clear error saying how to fix it, not with a cryptic mount error.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { HostCapabilityError } from '../errors.js';
import { nativeHelper } from '../util/native.js';
import { currentUser, resolveIdMap, type IdMap } from '../host/subid.js';

export interface HostTools {
  nsenter: string;
  newuidmap: string;
  newgidmap: string;
  tar: string;
}

export interface HostInfo {
  tools: HostTools & { launcher: string };
  idMap: IdMap;
  isRoot: boolean;
}

const TOOL_PACKAGES: Record<keyof HostTools, string> = {
  nsenter: 'util-linux',
  newuidmap: 'uidmap',
  newgidmap: 'uidmap',
  tar: 'tar',
};

/**
 * The first executable `name` on PATH (then the usual system dirs). Checked with sync calls: a
 * sandbox start looks up four tools over a dozen dirs, and each async check is a round trip
 * through libuv's thread pool that costs more than the check.
 */
export async function findExecutable(name: string, path = process.env.PATH ?? ''): Promise<string | undefined> {
  const dirs = [...path.split(delimiter), '/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];
  for (const d of dirs) {
    if (d === '') continue;
    const p = join(d, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}

async function readInt(path: string): Promise<number | undefined> {
  try {
    return Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
  } catch {
    return undefined;
  }
}

export async function probeHost(opts: { idCount?: number } = {}): Promise<HostInfo> {
  const maxNs = await readInt('/proc/sys/user/max_user_namespaces');
  if (maxNs === 0) {
    throw new HostCapabilityError(
      'user namespaces are disabled on this host (user.max_user_namespaces = 0)',
      'enable them as root: `sysctl -w user.max_user_namespaces=15000` (and persist it in /etc/sysctl.d/)',
    );
  }
  const me = currentUser();
  if (me.uid !== 0 && (await readInt('/proc/sys/kernel/unprivileged_userns_clone')) === 0) {
    throw new HostCapabilityError(
      'unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)',
      'enable them as root: `sysctl -w kernel.unprivileged_userns_clone=1`',
    );
  }
  if (me.uid !== 0 && (await readInt('/proc/sys/kernel/apparmor_restrict_unprivileged_userns')) === 1) {
    throw new HostCapabilityError(
      'AppArmor restricts unprivileged user namespaces on this host',
      'as root: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or run as root',
    );
  }
  const tools: Partial<HostTools> = {};
  const missing: string[] = [];
  for (const name of Object.keys(TOOL_PACKAGES) as (keyof HostTools)[]) {
    const found = await findExecutable(name);
    if (found === undefined) missing.push(name);
    else tools[name] = found;
  }
  if (missing.length > 0) {
    const pkgs = [...new Set(missing.map((m) => TOOL_PACKAGES[m as keyof HostTools]))];
    throw new HostCapabilityError(`missing host tools: ${missing.join(', ')}`, `install them: \`apt-get install ${pkgs.join(' ')}\``);
  }
  const full = tools as HostTools;
  if (me.uid !== 0) {
    for (const t of [full.newuidmap, full.newgidmap]) {
      const st = await stat(t);
      // Without setuid (or file capabilities, which we cannot cheaply read) the map write is refused.
      if ((st.mode & 0o4000) === 0 || st.uid !== 0) {
        throw new HostCapabilityError(
          `${t} is not setuid root, so it cannot write your subordinate id map`,
          `reinstall it: \`apt-get install --reinstall uidmap\` (or \`chmod u+s ${t}\` as root)`,
        );
      }
    }
  }
  const idMap = await resolveIdMap(opts.idCount === undefined ? {} : { count: opts.idCount });
  return { tools: { ...full, launcher: await nativeHelper('sandbox-launch') }, idMap, isRoot: me.uid === 0 };
}
