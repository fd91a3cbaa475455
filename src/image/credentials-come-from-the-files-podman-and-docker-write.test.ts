import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { findCredentials, parseChallenge } from './auth.js';
import { parseSourceRef } from './reference.js';

const work = mkdtempSync(join(tmpdir(), 'ms-creds-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const saved = { ...process.env };
afterEach(() => {
  for (const k of ['REGISTRY_AUTH_FILE', 'XDG_RUNTIME_DIR', 'DOCKER_CONFIG', 'XDG_CONFIG_HOME', 'HOME']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

const auth = (user: string): string => Buffer.from(`${user}:pw-${user}`).toString('base64');
function file(path: string, auths: Record<string, { auth: string }>): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, JSON.stringify({ auths }));
}

describe('registry credentials', () => {
  it('are looked up in $REGISTRY_AUTH_FILE, then containers auth.json under $XDG_RUNTIME_DIR, then ~/.docker/config.json', () => {
    const d = join(work, 'order');
    process.env['XDG_CONFIG_HOME'] = join(d, 'config');
    process.env['DOCKER_CONFIG'] = join(d, 'docker');
    process.env['XDG_RUNTIME_DIR'] = join(d, 'run');
    file(join(d, 'docker', 'config.json'), { 'https://reg.example:5000': { auth: auth('docker') }, 'https://index.docker.io/v1/': { auth: auth('hub') } });
    expect(findCredentials('reg.example:5000')).toEqual({ username: 'docker', password: 'pw-docker' });
    expect(findCredentials('docker.io')).toEqual({ username: 'hub', password: 'pw-hub' });
    file(join(d, 'run', 'containers', 'auth.json'), { 'reg.example:5000': { auth: auth('podman') } });
    expect(findCredentials('reg.example:5000')).toEqual({ username: 'podman', password: 'pw-podman' });
    process.env['REGISTRY_AUTH_FILE'] = join(d, 'explicit.json');
    file(join(d, 'explicit.json'), { 'reg.example:5000': { auth: auth('explicit') } });
    expect(findCredentials('reg.example:5000')).toEqual({ username: 'explicit', password: 'pw-explicit' });
    expect(findCredentials('other.example')).toBeUndefined();
  });

  it('a malformed credentials file is an error naming it', () => {
    const f = join(work, 'bad.json');
    writeFileSync(f, '{"auths": 7}');
    expect(() => findCredentials('x.example', f)).toThrow(/bad\.json is not valid/);
  });
});

describe('WWW-Authenticate challenges and image names', () => {
  it('parse realm, service and scope, quoted or not', () => {
    expect(parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull"')).toEqual({
      scheme: 'bearer',
      params: { realm: 'https://auth.docker.io/token', service: 'registry.docker.io', scope: 'repository:library/ubuntu:pull' },
    });
    expect(parseChallenge('Basic realm=test')).toEqual({ scheme: 'basic', params: { realm: 'test' } });
  });

  it('name registries, repositories, tags and digests as skopeo does', () => {
    expect(parseSourceRef('docker://ubuntu')).toMatchObject({ registry: 'docker.io', repository: 'library/ubuntu', tag: 'latest' });
    expect(parseSourceRef('docker://localhost:5000/a/b@sha256:' + 'a'.repeat(64))).toMatchObject({
      registry: 'localhost:5000',
      repository: 'a/b',
      digest: `sha256:${'a'.repeat(64)}`,
    });
    expect(parseSourceRef('docker://swebench/sweb.eval.x86_64.django_1776_django-11099:latest')).toMatchObject({
      registry: 'docker.io',
      repository: 'swebench/sweb.eval.x86_64.django_1776_django-11099',
      tag: 'latest',
    });
    expect(parseSourceRef('oci:/x/y:repo/name:1')).toMatchObject({ kind: 'oci', path: '/x/y', tag: 'repo/name:1' });
    expect(parseSourceRef('docker-archive:/a.tar')).toMatchObject({ kind: 'docker-archive', path: '/a.tar' });
    expect(() => parseSourceRef('docker://Host/UPPER:1')).toThrow(/bad repository name/);
  });
});
