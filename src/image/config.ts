/**
 * An image config's runtime part becomes the environment's runtime config: Env, WorkingDir,
 * User (names resolved through the image's own /etc/passwd and /etc/group), Entrypoint, Cmd and
 * labels, as a container engine would apply them.
 */
import { InvalidInputError } from '../errors.js';
import type { RuntimeConfig } from '../layer/env.js';
import type { ImageConfig } from './oci-schema.js';

export interface IdFiles {
  passwd?: string;
  group?: string;
}

function lookup(file: string | undefined, name: string, field: 2 | 3): { id: number; gid?: number } | undefined {
  for (const line of (file ?? '').split('\n')) {
    const f = line.split(':');
    if (f[0] === name && f.length > field) {
      const id = Number(f[2]);
      const gid = Number(f[3]);
      if (Number.isSafeInteger(id)) return Number.isSafeInteger(gid) ? { id, gid } : { id };
    }
  }
  return undefined;
}

/** `USER` as podman reads it: `uid`, `uid:gid`, `name`, `name:group`; a user without a group gets its passwd group. */
export function resolveUser(user: string, files: IdFiles): { uid: number; gid: number } {
  if (user === '') return { uid: 0, gid: 0 };
  const [u, g] = user.split(':', 2) as [string, string | undefined];
  let uid: number;
  let gid: number | undefined;
  if (/^\d+$/.test(u)) {
    uid = Number(u);
    const byId = (files.passwd ?? '')
      .split('\n')
      .map((l) => l.split(':'))
      .find((f) => f[2] === u);
    if (byId !== undefined && /^\d+$/.test(byId[3] ?? '')) gid = Number(byId[3]);
  } else {
    const p = lookup(files.passwd, u, 2);
    if (p === undefined) throw new InvalidInputError(`image config: user ${JSON.stringify(u)} is not in the image's /etc/passwd`, 'fix the image or its USER');
    uid = p.id;
    gid = p.gid;
  }
  if (g !== undefined && g !== '') {
    if (/^\d+$/.test(g)) gid = Number(g);
    else {
      const gr = lookup(files.group, g, 2);
      if (gr === undefined)
        throw new InvalidInputError(`image config: group ${JSON.stringify(g)} is not in the image's /etc/group`, 'fix the image or its USER');
      gid = gr.id;
    }
  }
  return { uid, gid: gid ?? 0 };
}

export function runtimeFromImage(cfg: ImageConfig, files: IdFiles): Partial<RuntimeConfig> {
  const c = cfg.config ?? {};
  const env: Record<string, string> = {};
  for (const kv of c.Env ?? []) {
    const i = kv.indexOf('=');
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  const out: Partial<RuntimeConfig> = {
    env,
    workdir: c.WorkingDir !== undefined && c.WorkingDir !== null && c.WorkingDir.startsWith('/') ? c.WorkingDir : '/',
    labels: c.Labels ?? {},
  };
  out.user = resolveUser(c.User ?? '', files);
  if (c.Entrypoint !== undefined && c.Entrypoint !== null) out.entrypoint = c.Entrypoint;
  if (c.Cmd !== undefined && c.Cmd !== null) out.cmd = c.Cmd;
  return out;
}
