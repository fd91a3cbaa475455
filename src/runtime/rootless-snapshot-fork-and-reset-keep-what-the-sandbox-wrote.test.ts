/**
 * Snapshot, fork (shared frozen copy) and reset as an unprivileged user over a store of its own:
 * the sandbox's writes (a 0600 file and a 0700 dir among them, owned by in-sandbox users, so by
 * subordinate ids the user cannot read directly; a whiteout and an opaque dir) reach both fork
 * children, a snapshot of them opens as the same tree with the same owners and modes, a sandbox
 * made from it forks, a fork child (whose parent's writes are a frozen lower) snapshots too, a
 * reset to the snapshot brings the tree back and a plain reset takes it all away. A symlink the
 * sandbox points at a file of the user's on the host stays a symlink in the snapshot: the
 * capture, which runs with rights over the user's files, never reads through it.
 */
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { REPO_ROOT, run } from '../../test/helpers/sandbox-testkit.js';
import { ensureTestUser, runScenarioAs } from '../../test/helpers/test-user.js';

const USER = 'msbtest';
let user: { name: string; uid: number; gid: number };
let work: string;
let scenarioWork: string | undefined;

beforeAll(async () => {
  user = { name: USER, ...(await ensureTestUser(USER, 300_000, { compileHelpers: true })) };
  work = await mkdtemp(join(tmpdir(), 'msb-rootless-fsr-'));
  chmodSync(work, 0o755);
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  mkdirSync(join(root, 'data'));
  writeFileSync(join(root, 'data/keep.txt'), 'keep\n');
  writeFileSync(join(root, 'data/gone.txt'), 'gone\n');
  mkdirSync(join(root, 'opt/old'), { recursive: true });
  writeFileSync(join(root, 'opt/old/x'), 'x\n');
  await pushTree(new LocalRegistry(join(work, 'registry')), new StorePaths(join(work, 'push')), root, { tag: 'kit/busybox', config: { workdir: '/root' } });
  await run('chmod', ['-R', 'a+rX', join(work, 'registry')]);
}, 300_000);
afterAll(async () => {
  if (work !== undefined) await rm(work, { recursive: true, force: true });
  if (scenarioWork !== undefined) await rm(scenarioWork, { recursive: true, force: true });
});

const WRITE =
  'echo parent > /root/a && rm /data/gone.txt && echo s > /root/secret && chmod 600 /root/secret && ' +
  'mkdir -m 700 /root/priv && echo p > /root/priv/f && chmod 600 /root/priv/f && chown 1000:1001 /root/priv/f && ' +
  'rm -r /opt/old && mkdir /opt/old && echo n > /opt/old/new';
const TREE =
  'ls /data /root /opt/old | tr "\\n" " "; echo; cat /root/a /root/secret /root/priv/f; ' + 'stat -c "%a %u:%g %n" /root/secret /root/priv /root/priv/f';
/** Written by the sandbox made from the snapshot, and then by a fork child of it. */
const MORE = 'echo m > /root/priv/more && chmod 600 /root/priv/more && mkdir -m 700 /root/deep && chown 1000:1000 /root/deep';
const MORE_TREE = 'cat /root/priv/more /root/c; stat -c "%a %u:%g %n" /root/priv/more /root/deep';

describe('rootless snapshot, fork and reset', () => {
  it('snapshot, create from it, fork x2 and reset work for an unprivileged user', async () => {
    const src = (m: string): string => JSON.stringify(join(REPO_ROOT, m));
    const r = await runScenarioAs(
      user,
      'msb-rootless-snap-',
      (stateDir) => `
      import { writeFileSync } from 'node:fs';
      import { openSandbox, forkShared, resetLeased } from ${src('src/runtime/open.ts')};
      import { Snapshots } from ${src('src/runtime/snapshot.ts')};
      import { LocalRegistry } from ${src('src/registry/local.ts')};
      import { StorePaths } from ${src('src/store/paths.ts')};
      const out = { steps: [] };
      const step = async (name, f) => {
        try { const v = await f(); out.steps.push({ name, ok: true }); return v; }
        catch (e) { out.steps.push({ name, ok: false, error: String(e?.code ?? '') + ' ' + String(e?.stack ?? e) }); return undefined; }
      };
      const sh = async (sb, c) => {
        if (sb === undefined) return 'no sandbox';
        const r = await sb.exec(['/bin/sh', '-c', c], { timeoutMs: 60000 });
        return r.stdout + (r.exitCode ? ' exit ' + r.exitCode + ' ' + r.stderr : '');
      };
      const forkTrees = async (sb, c, before) => {
        const trees = [];
        for (const r of (await step('fork', () => forkShared(store, sb, 2))) ?? []) {
          if (!r.ok) { trees.push('error: ' + String(r.error?.message ?? r.error)); continue; }
          if (before !== undefined) await before(r.sandbox);
          trees.push(await sh(r.sandbox, c));
          if (before === undefined) await r.sandbox.destroy();
          else kept.push(r.sandbox);
        }
        return trees;
      };
      const kept = [];
      const reg = new LocalRegistry(${JSON.stringify(join(work, 'registry'))});
      const store = new StorePaths(${JSON.stringify(join(stateDir, 'store'))});
      const snaps = new Snapshots(store, reg);
      const opts = { capabilities: 'default', warn: () => {} };
      const sb = await openSandbox(reg, store, 'kit/busybox', opts);
      out.fresh = await sh(sb, ${JSON.stringify(TREE)});
      out.write = await sh(sb, ${JSON.stringify(WRITE)});
      out.parent = await sh(sb, ${JSON.stringify(TREE)});
      writeFileSync(${JSON.stringify(join(stateDir, 'host-secret'))}, 'HOSTSECRET', { mode: 0o600 });
      out.link = await sh(sb, ${JSON.stringify(`ln -s ${join(stateDir, 'host-secret')} /opt/link`)});
      out.children = await forkTrees(sb, ${JSON.stringify(TREE)});
      const snap = await step('snapshot', () => snaps.take(sb));
      const fromSnap = snap && (await step('open snapshot', () => snaps.open(snap.id, opts)));
      out.fromSnapshot = await sh(fromSnap, ${JSON.stringify(TREE)});
      out.linkFromSnapshot = await sh(fromSnap, 'readlink /opt/link; cat /opt/link 2>/dev/null || echo unreadable');
      out.more = await sh(fromSnap, ${JSON.stringify(MORE)});
      // children of the sandbox made from the snapshot: its writes are their frozen lower
      out.grandchildren = await forkTrees(fromSnap, ${JSON.stringify(`${TREE}; ${MORE_TREE}`)}, (c) => sh(c, 'echo c > /root/c'));
      const snap2 = kept[0] && (await step('snapshot a fork child', () => snaps.take(kept[0])));
      const fromSnap2 = snap2 && (await step('open its snapshot', () => snaps.open(snap2.id, opts)));
      out.fromSnapshot2 = await sh(fromSnap2, ${JSON.stringify(`${TREE}; ${MORE_TREE}`)});
      // a grandchild (whose tree is more than the snapshot's) back to the snapshot; the first sandbox back to its start
      await step('reset to the snapshot', async () => resetLeased(store, kept[1], await snaps.layout(snap.id)));
      out.resetToSnapshot = await sh(kept[1], ${JSON.stringify(TREE)});
      await step('reset', () => resetLeased(store, sb));
      out.reset = await sh(sb, ${JSON.stringify(TREE)});
      for (const s of [sb, fromSnap, fromSnap2, ...kept]) await s?.destroy();
      console.log(JSON.stringify(out));
      process.exit(0);
      `,
    );
    scenarioWork = r.work;
    const out = r.out as { steps: { name: string; ok: boolean; error?: string }[]; [k: string]: unknown };
    expect(out.steps.filter((s) => !s.ok)).toEqual([]);
    expect(out.write).toBe('');
    const parent = out.parent as string;
    expect(parent).toBe(
      '/data: keep.txt  /opt/old: new  /root: a priv secret \n' + 'parent\ns\np\n' + '600 0:0 /root/secret\n700 0:0 /root/priv\n600 1000:1001 /root/priv/f\n',
    );
    expect(out.children).toEqual([parent, parent]);
    expect(out.fromSnapshot).toBe(parent);
    expect(out.link).toBe('');
    expect(out.linkFromSnapshot).toBe(`${join(r.stateDir, 'host-secret')}\nunreadable\n`);
    expect(out.more).toBe('');
    const more = `${parent.replace('/root: a priv secret', '/root: a c deep priv secret')}m\nc\n600 0:0 /root/priv/more\n700 1000:1000 /root/deep\n`;
    expect(out.grandchildren).toEqual([more, more]);
    expect(out.fromSnapshot2).toBe(more);
    expect(out.resetToSnapshot).toBe(parent);
    expect(out.reset).toBe(out.fresh);
  }, 300_000);
});
