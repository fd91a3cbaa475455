/**
 * GET /v1/sandboxes/:id/diff over a real git repository. The busybox environment of the other
 * server tests has no git, so this server's sandboxes come from the shared Debian fixture plus an
 * instance layer (as src/sandbox/fork-diff.test.ts makes them) through the manager's provider seam.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, forkSandboxShared, shiftCopyTree, type HostInfo } from '../sandbox/index.js';
import { CACHE_DIR, debianLower, freshStateDir, hostInfo, run } from '../../test/helpers/sandbox-testkit.js';
import { buildApp } from './app.js';
import { SandboxManager } from './manager.js';

const TOKEN = 'diff-test-token-0123456789';
let host: HostInfo;
let lowers: string[];
let stateDir: string;
let layer: string;
let mgr: SandboxManager;
let app: ReturnType<typeof buildApp>;
let url: string;

async function git(cwd: string, ...args: string[]): Promise<void> {
  await run('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], { cwd });
}

beforeAll(async () => {
  host = await hostInfo();
  const debian = await debianLower(host.idMap);
  layer = await mkdtemp(join(tmpdir(), 'msb-srv-repo-'));
  const repo = join(layer, 'work/repo');
  await run('mkdir', ['-p', repo]);
  await git(repo, 'init', '-q', '-b', 'main');
  await writeFile(join(repo, 'hello.txt'), 'hello\nworld\n');
  await git(repo, 'add', '-A');
  await git(repo, 'commit', '-q', '-m', 'base');
  lowers = [debian, await shiftCopyTree(layer, join(CACHE_DIR, `srv-repo-layer-${process.pid}-${host.idMap.uidStart}`), host.idMap)];
  stateDir = await freshStateDir();
  mgr = new SandboxManager(
    {
      open: (_ref, o) =>
        createSandbox({ lowerDirs: lowers, stateDir, config: { workdir: '/work/repo', ...(o.config?.env ? { env: o.config.env } : {}) } }, { host }),
      fork: (sb, n) => forkSandboxShared(sb, n, { host }),
      reset: (sb) => sb.reset(),
    },
    { maxSandboxes: 4, ttlMs: 600_000, idleMs: 600_000 },
  );
  app = buildApp(mgr, { token: TOKEN, log: () => undefined });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  url = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
}, 600_000);
afterAll(async () => {
  await mgr?.shutdown();
  await app?.close();
  if (stateDir !== undefined) await rm(stateDir, { recursive: true, force: true });
  if (lowers?.[1] !== undefined) await rm(lowers[1], { recursive: true, force: true });
  if (layer !== undefined) await rm(layer, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(`${url}${path}`, { method: 'POST', headers: { 'x-api-key': TOKEN, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return (await r.json()) as Record<string, unknown>;
}

describe('diff over HTTP', () => {
  it('is the repository changes against the base commit, edits and new files included; a fork carries them and diffs on its own', async () => {
    const { id } = (await post('/v1/sandboxes', { ref: 'any' })) as { id: string };
    expect(await post(`/v1/sandboxes/${id}/exec`, { command: 'sed -i s/world/there/ hello.txt && echo new > added.txt' })).toMatchObject({ exit_code: 0 });
    const r = await fetch(`${url}/v1/sandboxes/${id}/diff`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(r.status).toBe(200);
    const patch = await r.text();
    expect(patch).toContain('diff --git a/hello.txt b/hello.txt');
    expect(patch).toContain('-world\n+there');
    expect(patch).toContain('+++ b/added.txt');

    const { children } = (await post(`/v1/sandboxes/${id}/fork`, { count: 1 })) as { children: Array<{ id: string }> };
    const child = children[0]!.id;
    await post(`/v1/sandboxes/${child}/exec`, { command: 'echo more >> hello.txt' });
    const childPatch = await (await fetch(`${url}/v1/sandboxes/${child}/diff`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    expect(childPatch).toContain('+there\n+more');
    expect(await (await fetch(`${url}/v1/sandboxes/${id}/diff`, { headers: { authorization: `Bearer ${TOKEN}` } })).text()).toBe(patch);

    const notRepo = await fetch(`${url}/v1/sandboxes/${id}/diff?workdir=/tmp`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(notRepo.status).toBe(422);
    expect(await notRepo.json()).toMatchObject({ error: { code: 'DIFF_FAILED' } });
  });
});
