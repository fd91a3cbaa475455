/**
 * What a build sandbox with network needs of the host's network settings to reach registries the
 * way the host does: its proxy variables and its CA certificates. Behind an egress proxy (an
 * explicit one, or a transparent one that signs with its own CA) `npm ci`, `cargo fetch`,
 * `go mod download` and `pip install` in a Debian root fail otherwise: that root trusts Debian's CAs
 * only, and knows no proxy.
 *
 * The variables go into the build commands' environment only (never the script or the log, since a
 * proxy URL may hold a password, and never the environment's runtime config). The certificates are
 * one PEM bundle in a directory of their own, stacked as the sandbox's top lower layer at
 * HOST_CA_FILE: the commands read it there, and since no command wrote it, it is never part of the
 * captured layer. Every common client is pointed at it; a recipe's own `env` still wins.
 */
import { chmod, chown, mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isErrno } from '../util/fs.js';

/** Proxy variables passed in, each in both spellings (curl reads only `http_proxy`, others either). */
const PROXY_VARS = ['HTTP_PROXY', 'HTTPS_PROXY', 'FTP_PROXY', 'ALL_PROXY', 'NO_PROXY'] as const;

/** Where the host's bundles usually are, by distribution; the first one present is the system's. */
const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/ca-bundle.pem', '/etc/ssl/cert.pem'];

/** Where build commands find the host's CA bundle. */
export const HOST_CA_DIR = '/.minisandbox-host';
export const HOST_CA_FILE = `${HOST_CA_DIR}/ca-certificates.crt`;

/** The clients' variables for a CA bundle: OpenSSL's (Go, Ruby, PHP, Python's ssl), node's, curl's, git's, requests', pip's, cargo's. */
const CA_VARS = ['SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'CURL_CA_BUNDLE', 'GIT_SSL_CAINFO', 'REQUESTS_CA_BUNDLE', 'PIP_CERT', 'CARGO_HTTP_CAINFO'] as const;

export interface HostNetworkSettings {
  /** Proxy variables, both spellings. */
  proxy: Record<string, string>;
  /** The host's CA bundle (PEM); null when the host has none that can be read. */
  caBundle: string | null;
}

async function readable(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    if (isErrno(e, 'ENOENT') || isErrno(e, 'EACCES') || isErrno(e, 'EISDIR') || isErrno(e, 'ENOTDIR')) return null;
    throw e;
  }
}

/**
 * The host's settings from its environment: the proxy variables set in either spelling, and its
 * trust: the file SSL_CERT_FILE names, else the system bundle, plus NODE_EXTRA_CA_CERTS's file
 * when it is another one (a proxy's CA is often added there only).
 */
export async function hostNetworkSettings(env: NodeJS.ProcessEnv = process.env): Promise<HostNetworkSettings> {
  const proxy: Record<string, string> = {};
  for (const name of PROXY_VARS) {
    const upper = env[name];
    const lower = env[name.toLowerCase()];
    const value = upper || lower;
    if (value === undefined || value === '') continue;
    proxy[name] = upper || value;
    proxy[name.toLowerCase()] = lower || value;
  }
  const pems: string[] = [];
  const taken = new Set<string>();
  const take = async (src: string): Promise<boolean> => {
    const real = await realpath(src).catch(() => null);
    if (real === null || taken.has(real)) return false;
    const text = await readable(real);
    if (text === null || !text.includes('-----BEGIN CERTIFICATE-----')) return false;
    taken.add(real);
    pems.push(text.endsWith('\n') ? text : `${text}\n`);
    return true;
  };
  // the system's trust is one bundle: the first there is
  for (const src of env.SSL_CERT_FILE ? [env.SSL_CERT_FILE] : SYSTEM_BUNDLES) if (await take(src)) break;
  if (env.NODE_EXTRA_CA_CERTS) await take(env.NODE_EXTRA_CA_CERTS);
  return { proxy, caBundle: pems.length > 0 ? pems.join('') : null };
}

/** The build commands' variables: the proxies, and every client's CA variable naming HOST_CA_FILE. */
export function hostNetworkEnv(s: HostNetworkSettings): Record<string, string> {
  return { ...s.proxy, ...(s.caBundle === null ? {} : Object.fromEntries(CA_VARS.map((v) => [v, HOST_CA_FILE]))) };
}

/**
 * A directory holding HOST_CA_FILE, to stack as a lower layer, owned by the sandbox's root as the
 * layers below it are (`idShift`: their lay-out's owner shift). null when there is no bundle.
 */
export async function stageHostCa(s: HostNetworkSettings, tmpDir: string, idShift: number): Promise<{ dir: string; remove: () => Promise<void> } | null> {
  if (s.caBundle === null) return null;
  await mkdir(tmpDir, { recursive: true });
  const dir = await mkdtemp(join(tmpDir, 'host-ca-'));
  await chmod(dir, 0o755);
  const sub = join(dir, HOST_CA_DIR);
  await mkdir(sub, { mode: 0o755 });
  await writeFile(join(dir, HOST_CA_FILE), s.caBundle, { mode: 0o644 });
  for (const p of [dir, sub, join(dir, HOST_CA_FILE)]) await chown(p, idShift, idShift);
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
