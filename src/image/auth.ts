/**
 * Registry credentials from the files users already have, in the order podman and skopeo read
 * them: `--authfile` / `$REGISTRY_AUTH_FILE`, `${XDG_RUNTIME_DIR}/containers/auth.json`,
 * `~/.config/containers/auth.json`, then `~/.docker/config.json` (`$DOCKER_CONFIG/config.json`).
 * And the `WWW-Authenticate` challenge a registry answers a 401 with.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';

export interface Credentials {
  username: string;
  password: string;
}

const AuthFileSchema = z.object({
  auths: z
    .record(z.string(), z.object({ auth: z.string().optional(), username: z.string().optional(), password: z.string().optional() }).passthrough())
    .optional(),
});

export function authFiles(explicit?: string): string[] {
  const files: string[] = [];
  if (explicit !== undefined) files.push(explicit);
  if (process.env['REGISTRY_AUTH_FILE'] !== undefined) files.push(process.env['REGISTRY_AUTH_FILE']);
  if (process.env['XDG_RUNTIME_DIR'] !== undefined) files.push(join(process.env['XDG_RUNTIME_DIR'], 'containers', 'auth.json'));
  files.push(join(process.env['XDG_CONFIG_HOME'] ?? join(homedir(), '.config'), 'containers', 'auth.json'));
  files.push(join(process.env['DOCKER_CONFIG'] ?? join(homedir(), '.docker'), 'config.json'));
  return files;
}

/** The keys a host may be stored under (docker writes URLs; Docker Hub as its v1 index URL). */
function keysFor(host: string): string[] {
  const keys = [host, `https://${host}`, `http://${host}`, `https://${host}/v1/`, `https://${host}/v2/`];
  if (host === 'docker.io' || host === 'registry-1.docker.io') keys.push('https://index.docker.io/v1/', 'index.docker.io', 'docker.io', 'registry-1.docker.io');
  return keys;
}

export function findCredentials(host: string, explicitFile?: string): Credentials | undefined {
  for (const f of authFiles(explicitFile)) {
    let text: string;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue; // a file that is not there is simply not used
    }
    let parsed;
    try {
      parsed = AuthFileSchema.parse(JSON.parse(text));
    } catch (e) {
      throw new InvalidInputError(`credentials file ${f} is not valid: ${(e as Error).message}`, 'fix or remove it (podman login / docker login write it)');
    }
    for (const k of keysFor(host)) {
      const a = parsed.auths?.[k];
      if (a === undefined) continue;
      if (a.auth !== undefined && a.auth !== '') {
        const plain = Buffer.from(a.auth, 'base64').toString('utf8');
        const i = plain.indexOf(':');
        if (i > 0) return { username: plain.slice(0, i), password: plain.slice(i + 1) };
      }
      if (a.username !== undefined && a.password !== undefined) return { username: a.username, password: a.password };
    }
  }
  return undefined;
}

export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/** `Bearer realm="https://auth/token",service="registry",scope="repository:x:pull"` */
export function parseChallenge(header: string): Challenge {
  const m = /^\s*(\S+)\s*(.*)$/s.exec(header);
  const scheme = (m?.[1] ?? '').toLowerCase();
  const params: Record<string, string> = {};
  for (const p of (m?.[2] ?? '').matchAll(/([A-Za-z_][\w-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g))
    params[p[1]!.toLowerCase()] = (p[2] ?? p[3] ?? '').replace(/\\(.)/g, '$1');
  return { scheme, params };
}

export function basicHeader(c: Credentials): string {
  return `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;
}
