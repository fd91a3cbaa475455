/**
 * Which host paths a tenant's create may mount (`serve --allow-mount DIR[:rw]`): only sources
 * whose real path is an allowed dir or beneath one, read-only unless the dir was allowed `:rw` and
 * the create asks `readonly: false`. Nothing is allowed unless the operator says so. The checked
 * real path is what the launcher opens, through no symlink (noSymlinks), so a tenant who plants a
 * symlink in an allowed dir (through a rw mount of its own) cannot swap it in after the check.
 */
import { realpathSync, statSync } from 'node:fs';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import type { BindMount } from '../sandbox/bind-mounts.js';

export interface AllowedMountDir {
  /** Its real path. */
  dir: string;
  rw: boolean;
}

/** One `--allow-mount` value: DIR, DIR:ro or DIR:rw; DIR must be an existing directory. */
export function parseAllowMount(spec: string): AllowedMountDir {
  const m = /^(.*?)(?::(ro|rw))?$/.exec(spec)!;
  const path = m[1]!;
  let dir: string;
  try {
    dir = realpathSync(path);
  } catch (e) {
    throw new InvalidInputError(`--allow-mount ${spec}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, 'give an existing host directory');
  }
  if (!statSync(dir).isDirectory()) throw new InvalidInputError(`--allow-mount ${spec}: not a directory`, 'give a host directory');
  return { dir, rw: m[2] === 'rw' };
}

const notAllowed = (message: string, allowed: readonly AllowedMountDir[]): MinisandboxError =>
  new MinisandboxError('MOUNT_NOT_ALLOWED', message, {
    hint:
      allowed.length === 0
        ? 'this server allows no host paths; its operator can allow dirs with `serve --allow-mount DIR[:rw]`'
        : `allowed: ${allowed.map((a) => `${a.dir}${a.rw ? ' (rw)' : ' (read-only)'}`).join(', ')}`,
  });

/** The mounts as the sandbox gets them, or MOUNT_NOT_ALLOWED naming the first refused. */
export function allowedMounts(requested: readonly BindMount[], allowed: readonly AllowedMountDir[]): BindMount[] {
  return requested.map((m, i) => {
    if (allowed.length === 0) throw notAllowed(`mounts[${i}]: host paths are not allowed here`, allowed);
    if (!m.source.startsWith('/'))
      throw new InvalidInputError(`mounts[${i}].source ${JSON.stringify(m.source)}: not an absolute path`, 'give a host path from /');
    let real: string;
    try {
      real = realpathSync(m.source);
    } catch {
      // not said whether it exists: outside the allowed dirs that would be a probe of the host
      throw notAllowed(`mounts[${i}].source ${m.source}: not an existing path in an allowed dir`, allowed);
    }
    const under = allowed.filter((a) => real === a.dir || real.startsWith(a.dir === '/' ? '/' : `${a.dir}/`));
    if (under.length === 0) throw notAllowed(`mounts[${i}].source ${m.source}: not in a dir this server allows`, allowed);
    const readonly = m.readonly ?? true;
    if (!readonly && !under.some((a) => a.rw)) throw notAllowed(`mounts[${i}].source ${m.source}: allowed read-only only`, allowed);
    return { source: real, target: m.target, readonly, noSymlinks: true };
  });
}
