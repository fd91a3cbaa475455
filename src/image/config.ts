/**
 * An image config's runtime part becomes the environment's runtime config: Env, WorkingDir,
 * User (names resolved through the image's own /etc/passwd and /etc/group), Entrypoint, Cmd and
 * labels, as a container engine would apply them.
 */
import { InvalidInputError } from '../errors.js';
import { DEFAULT_ID_COUNT } from '../host/subid.js';
import type { RuntimeConfig } from '../layer/env.js';
import type { ImageConfig } from './oci-schema.js';

export interface IdFiles {
  passwd?: string;
  group?: string;
}

/** The highest in-sandbox id: a sandbox maps 0..DEFAULT_ID_COUNT-1, and a command runs only as one of those. */
export const MAX_IMAGE_ID = DEFAULT_ID_COUNT - 1;

/** Fields of the line of an /etc/passwd or /etc/group whose field `by` (0: name, 2: id) is `key`. */
function lookup(file: string | undefined, key: string, by: 0 | 2): string[] | undefined {
  for (const line of (file ?? '').split('\n')) {
    const f = line.split(':');
    if (f[by] === key && f.length > 2) return f;
  }
  return undefined;
}

/**
 * `USER` as podman reads it: `uid`, `uid:gid`, `name`, `name:group`; a user without a group gets
 * its passwd group. Every id, given or looked up, must be one of the sandbox's (0..MAX_IMAGE_ID):
 * past them a command could not switch to it, and (uid_t)-1 once ran it as root.
 */
export function resolveUser(user: string, files: IdFiles, what = 'image'): { uid: number; gid: number } {
  if (user === '') return { uid: 0, gid: 0 };
  const bad = (message: string): InvalidInputError =>
    new InvalidInputError(`${what} config: User ${JSON.stringify(user)}: ${message}`, 'fix the image or its USER');
  const id = (kind: 'uid' | 'gid', text: string, from?: string): number => {
    const n = /^\d+$/.test(text) ? Number(text) : Number.NaN;
    if (Number.isSafeInteger(n) && n <= MAX_IMAGE_ID) return n;
    throw new InvalidInputError(
      `${what} config: User ${JSON.stringify(user)}: ${kind} ${text}${from === undefined ? '' : ` (from the image's ${from})`} ` +
        `is outside the sandbox's ids 0..${MAX_IMAGE_ID}`,
      `a sandbox maps in-sandbox ids 0..${MAX_IMAGE_ID} only: rebuild the image with a USER (and its /etc/passwd) in that range`,
    );
  };
  const [u, g] = user.split(':', 2) as [string, string | undefined];
  let uid: number;
  let gid: number | undefined;
  if (/^\d+$/.test(u)) {
    uid = id('uid', u);
    const byId = lookup(files.passwd, u, 2);
    if (byId !== undefined && /^\d+$/.test(byId[3] ?? '')) gid = id('gid', byId[3]!, '/etc/passwd');
  } else {
    const p = lookup(files.passwd, u, 0);
    if (p === undefined) throw bad(`user ${JSON.stringify(u)} is not in the image's /etc/passwd`);
    uid = id('uid', p[2] ?? '', '/etc/passwd');
    if (/^\d+$/.test(p[3] ?? '')) gid = id('gid', p[3]!, '/etc/passwd');
  }
  if (g !== undefined && g !== '') {
    if (/^\d+$/.test(g)) gid = id('gid', g);
    else {
      const gr = lookup(files.group, g, 0);
      if (gr === undefined) throw bad(`group ${JSON.stringify(g)} is not in the image's /etc/group`);
      gid = id('gid', gr[2] ?? '', '/etc/group');
    }
  }
  return { uid, gid: gid ?? 0 };
}

/** `what`: the image as the user named it, for messages. */
export function runtimeFromImage(cfg: ImageConfig, files: IdFiles, what = 'image'): Partial<RuntimeConfig> {
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
  out.user = resolveUser(c.User ?? '', files, what);
  if (c.Entrypoint !== undefined && c.Entrypoint !== null) out.entrypoint = c.Entrypoint;
  if (c.Cmd !== undefined && c.Cmd !== null) out.cmd = c.Cmd;
  return out;
}
