/**
 * A build sandbox with network reaches registries the way the host does: behind an egress proxy
 * `npm ci` in a Debian root failed until a recipe copied the host's CA certificates in by hand.
 * The commands now see the host's proxy variables (both spellings) and its CA bundle (every
 * client's variable names it), through a real HTTP proxy on loopback here; none of it is in the
 * captured layer or the environment's config, a proxy's password is never logged, and a recipe
 * saying `hostNetworkSettings: false` gets none of it.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadRecipeCatalog } from '../recipe/catalog.js';
import { LocalRegistry } from '../registry/local.js';
import { openSandbox } from '../runtime/open.js';
import { StorePaths } from '../store/paths.js';
import { executePlan } from './execute.js';
import { HOST_CA_FILE, hostNetworkSettings } from './host-network.js';
import { planRecipe } from './plan.js';

const work = mkdtempSync(join(tmpdir(), 'ms-hostnet-'));
chmodSync(work, 0o755);
const reg = new LocalRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
const recipes = join(work, 'recipes');
const seen: string[] = [];
let proxy: Server;
let port: number;

beforeAll(async () => {
  cpSync(resolve('recipes/test/base.yaml'), join(recipes, 'base.yaml'));
  // a forward proxy: answers for the host it is asked for, as an egress proxy would fetch it
  proxy = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} auth=${req.headers['proxy-authorization'] ?? 'none'}`);
    res.end('pong via the proxy\n');
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  port = (proxy.address() as AddressInfo).port;
  // a CA of the proxy's, which the host trusts beside its system bundle (NODE_EXTRA_CA_CERTS)
  await promisify(execFile)('openssl', [
    ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=test-egress-ca'],
    ...['-keyout', join(work, 'ca.key'), '-out', join(work, 'egress-ca.pem')],
  ]);
});
afterAll(async () => {
  await new Promise<void>((r) => proxy.close(() => r()));
  rmSync(work, { recursive: true, force: true });
});

/** Shell words printing the proxy variables without their credentials. */
const SH_PROXIES = ['HTTPS_PROXY#*@', 'https_proxy#*@', 'HTTP_PROXY#*@', 'NO_PROXY:-', 'no_proxy:-'].map((v) => `$${'{'}${v}}`).join(' ');

const sha = (text: string): string => createHash('sha256').update(text).digest('hex');

function recipe(name: string, extra: string): string {
  const file = join(recipes, `${name}.yaml`);
  writeFileSync(
    file,
    [
      'kind: env',
      `name: ${name}`,
      'parent: base.yaml',
      extra,
      'commands:',
      // the proxies without their credentials, and whether there is a bundle
      `  - 'echo "proxies: ${SH_PROXIES}"'`,
      `  - 'if [ -n "$SSL_CERT_FILE" ]; then sha256sum "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" "$CURL_CA_BUNDLE" "$GIT_SSL_CAINFO"; ` +
        `else echo "no CA bundle"; fi'`,
      `  - 'test -e ${HOST_CA_FILE} && echo "bundle present" || echo "no bundle at all"'`,
      '  - wget -q -O - http://registry.example.invalid/ping || echo "no answer"',
      `  - echo built by ${name} > /stamp`,
    ].join('\n'),
  );
  return file;
}

async function build(file: string, tag: string, env: NodeJS.ProcessEnv): Promise<string> {
  const { catalog, root } = await loadRecipeCatalog(file);
  const rows = await executePlan(planRecipe(catalog, root.source, tag), {
    registry: reg,
    store,
    logDir: join(work, 'logs'),
    jobs: 1,
    keepGoing: false,
    force: false,
    timeoutMs: 120_000,
    hostNetwork: await hostNetworkSettings(env),
  });
  const envRow = rows.find((r) => r.kind === 'env')!;
  expect(envRow.status).toBe('built');
  return readFileSync(envRow.log!, 'utf8');
}

describe("a build sandbox with network gets the host's network settings", () => {
  it('sees its proxies in both spellings and its CA bundle, and goes through the proxy', async () => {
    const hostEnv = {
      HTTPS_PROXY: `http://builder:s3cret@127.0.0.1:${port}`,
      http_proxy: `http://builder:s3cret@127.0.0.1:${port}`,
      no_proxy: 'localhost,127.0.0.1',
      SSL_CERT_FILE: '/etc/ssl/certs/ca-certificates.crt',
      NODE_EXTRA_CA_CERTS: join(work, 'egress-ca.pem'),
    };
    const log = await build(recipe('with-host', ''), 'test/with-host', hostEnv);
    const p = `127.0.0.1:${port}`;
    expect(log).toContain(`proxies: ${p} ${p} ${p} localhost,127.0.0.1 localhost,127.0.0.1`);
    // one bundle: the system's and the proxy's CA, named by every client's variable
    const bundle = readFileSync(hostEnv.SSL_CERT_FILE, 'utf8') + readFileSync(hostEnv.NODE_EXTRA_CA_CERTS, 'utf8');
    expect(log.match(new RegExp(`^${sha(bundle)}  ${HOST_CA_FILE}$`, 'gm'))).toHaveLength(4);
    expect(log).toContain('pong via the proxy');
    expect(seen).toContain(`GET http://registry.example.invalid/ping auth=Basic ${Buffer.from('builder:s3cret').toString('base64')}`);
    // the log names the variables it passed, never their values
    expect(log).toMatch(/^host network settings: HTTP_PROXY, HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE, NODE_EXTRA_CA_CERTS/m);
    expect(log).not.toContain('s3cret');
  });

  it('none of it is in the captured layer or in the environment it made', async () => {
    const sb = await openSandbox(reg, store, 'test/with-host');
    try {
      const o = await sb.exec(['/bin/sh', '-c', `cat /stamp; ls -a /; env; test -e ${HOST_CA_FILE} && echo "bundle in the layer"`]);
      expect(o.stdout).toMatch(/^built by with-host\n/);
      expect(o.stdout).not.toContain('.minisandbox-host');
      expect(o.stdout).not.toMatch(/proxy|SSL_CERT_FILE|NODE_EXTRA_CA_CERTS|bundle in the layer/i);
    } finally {
      await sb.destroy();
    }
  });

  it('a recipe saying hostNetworkSettings: false gets neither', async () => {
    seen.length = 0;
    const log = await build(recipe('own-settings', 'hostNetworkSettings: false'), 'test/own-settings', {
      HTTPS_PROXY: `http://127.0.0.1:${port}`,
      http_proxy: `http://127.0.0.1:${port}`,
      SSL_CERT_FILE: '/etc/ssl/certs/ca-certificates.crt',
    });
    expect(log).toContain('proxies:     \n');
    expect(log).toContain('no CA bundle');
    expect(log).toContain('no bundle at all');
    expect(seen).toEqual([]);
    expect(log).not.toContain('host network settings');
  });
});
