/**
 * Fork (shared frozen copy) and reset as an unprivileged user over a store of its own: the
 * sandbox's writes (a 0600 file and a 0700 dir among them, owned by subordinate ids the user cannot
 * read directly) reach both children, and a reset takes them all away. (Snapshots as such a user
 * are refused, clearly, for now: capture reads the upper dir directly, which that user cannot.)
 */
import { chmodSync, chownSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { REPO_ROOT, run } from '../../test/helpers/sandbox-testkit.js';
import { ensureTestUser } from '../../test/helpers/test-user.js';

const USER = 'msbtest';
let uid: number;
let gid: number;
let work: string;

beforeAll(async () => {
  ({ uid, gid } = await ensureTestUser(USER, 300_000, { compileHelpers: true }));
  work = await mkdtemp(join(tmpdir(), 'msb-rootless-fsr-'));
  chmodSync(work, 0o755);
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  mkdirSync(join(root, 'data'));
  writeFileSync(join(root, 'data/keep.txt'), 'keep\n');
  writeFileSync(join(root, 'data/gone.txt'), 'gone\n');
  await pushTree(new LocalRegistry(join(work, 'registry')), new StorePaths(join(work, 'push')), root, { tag: 'kit/busybox', config: { workdir: '/root' } });
  await run('chmod', ['-R', 'a+rX', join(work, 'registry')]);
  mkdirSync(join(work, 'mine'));
  chownSync(join(work, 'mine'), uid, gid);
}, 300_000);
afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

const WRITE =
  'echo parent > /root/a && rm /data/gone.txt && echo s > /root/secret && chmod 600 /root/secret && ' +
  'mkdir -m 700 /root/priv && echo p > /root/priv/f && chown 1000:1000 /root/priv/f';
const TREE = 'ls /data /root | tr "\\n" " "; cat /root/a /root/secret /root/priv/f; stat -c %u /root/priv/f';

describe('rootless fork and reset', () => {
  it('fork x2 and reset work for an unprivileged user', async () => {
    const src = (m: string): string => JSON.stringify(join(REPO_ROOT, m));
    const script = join(work, 'mine', 'scenario.mts');
    writeFileSync(
      script,
      `
      import { openSandbox, forkShared, resetLeased } from ${src('src/runtime/open.ts')};
      import { Snapshots } from ${src('src/runtime/snapshot.ts')};
      import { LocalRegistry } from ${src('src/registry/local.ts')};
      import { StorePaths } from ${src('src/store/paths.ts')};
      const out = { steps: [] };
      const step = async (name, f) => {
        try { const v = await f(); out.steps.push({ name, ok: true }); return v; }
        catch (e) { out.steps.push({ name, ok: false, error: String(e?.stack ?? e) }); return undefined; }
      };
      const sh = async (sb, c) => {
        const r = await sb.exec(['/bin/sh', '-c', c], { timeoutMs: 60000 });
        return r.stdout + (r.exitCode ? ' exit ' + r.exitCode + ' ' + r.stderr : '');
      };
      const reg = new LocalRegistry(${JSON.stringify(join(work, 'registry'))});
      const store = new StorePaths(${JSON.stringify(join(work, 'mine', 'store'))});
      const opts = { capabilities: 'default', warn: () => {} };
      const sb = await openSandbox(reg, store, 'kit/busybox', opts);
      out.fresh = await sh(sb, ${JSON.stringify(TREE)});
      out.write = await sh(sb, ${JSON.stringify(WRITE)});
      out.parent = await sh(sb, ${JSON.stringify(TREE)});
      const forked = await step('fork', () => forkShared(store, sb, 2));
      out.children = [];
      for (const r of forked ?? []) {
        if (!r.ok) { out.children.push('error: ' + String(r.error?.message ?? r.error)); continue; }
        out.children.push(await sh(r.sandbox, ${JSON.stringify(TREE)}));
        await r.sandbox.destroy();
      }
      out.snapshot = await new Snapshots(store, reg).take(sb).then(() => 'taken', (e) => e.code);
      await step('reset', () => resetLeased(store, sb));
      out.reset = await sh(sb, ${JSON.stringify(TREE)});
      await sb.destroy();
      console.log(JSON.stringify(out));
      process.exit(0);
      `,
    );
    chownSync(script, uid, gid);
    const r = await run(
      'runuser',
      ['-u', USER, '--', 'env', `HOME=${join(work, 'mine')}`, `PATH=${process.env.PATH ?? '/usr/bin:/bin'}`, join(REPO_ROOT, 'node_modules/.bin/tsx'), script],
      { cwd: join(work, 'mine'), timeout: 240_000 },
    ).catch((e: { stdout?: string; stderr?: string }) => ({ stdout: e.stdout ?? '', stderr: `${e.stderr ?? ''}${String(e)}` }));
    const last = r.stdout.trim().split('\n').pop() ?? '';
    expect(last.startsWith('{'), `${r.stdout}\n${r.stderr}`).toBe(true);
    const out = JSON.parse(last) as { steps: { name: string; ok: boolean; error?: string }[]; [k: string]: unknown };
    expect(out.steps.filter((s) => !s.ok)).toEqual([]);
    expect(out.write).toBe('');
    const parent = out.parent as string;
    expect(parent).toBe('/data: keep.txt  /root: a priv secret parent\ns\np\n1000\n');
    expect(out.children).toEqual([parent, parent]);
    expect(out.snapshot).toBe('HOST_CAPABILITY');
    expect(out.reset).toBe(out.fresh);
  }, 300_000);
});
