/**
 * An attacker's snapshot, rootless: the capture runs in a child with rights over the user's own
 * files and the sandbox's ids (runtime/snapshot-capture.ts), so a link it followed could read the
 * user's files on the host. Inside the sandbox a ring of processes that continue each other keeps
 * a flipper swapping the upper's directories for absolute symlinks to a directory of the user's
 * holding a secret file (0600, as large as the sandbox's own, with a secret extended attribute)
 * while snapshots are taken again and again. No snapshot may hold the secret: not its packs or
 * manifest, not a sandbox made from it; and the SIGSTOP sweep (no freezer without root) holds
 * the ring for every capture, so each sandbox from a snapshot sees the flipper's dirs whole.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomHex } from '../util/lazy-crypto.js';
import { publishedBusybox } from '../../test/helpers/published-busybox.js';
import { REPO_ROOT, run } from '../../test/helpers/sandbox-testkit.js';
import { ensureTestUser, runScenarioAs } from '../../test/helpers/test-user.js';

const DIRS = 8;
const ROUNDS = 4;
const SECRET = `HOST-SECRET-${randomHex(16)}`;
const kit = publishedBusybox('msb-rootless-swap-', 'kit/busybox', { workdir: '/root' });
let user: { name: string; uid: number; gid: number };
let scenarioWork: string | undefined;

beforeAll(async () => {
  user = { name: 'msbtest', ...(await ensureTestUser('msbtest', 300_000, { compileHelpers: true })) };
  await run('chmod', ['-R', 'a+rX', kit.reg.root]);
}, 300_000);
afterAll(async () => {
  if (scenarioWork !== undefined) await rm(scenarioWork, { recursive: true, force: true });
});

describe('a rootless snapshot of a sandbox that swaps its dirs for symlinks to the host', () => {
  it("never holds the user's host file or its attributes, and holds the ring still for every capture", async () => {
    const src = (m: string): string => JSON.stringify(join(REPO_ROOT, m));
    const r = await runScenarioAs(
      user,
      'msb-rootless-swap-s-',
      (stateDir) => `
      import { execFileSync } from 'node:child_process';
      import { mkdirSync, writeFileSync } from 'node:fs';
      import { openSandbox } from ${src('src/runtime/open.ts')};
      import { Snapshots } from ${src('src/runtime/snapshot.ts')};
      import { LocalRegistry } from ${src('src/registry/local.ts')};
      import { StorePaths } from ${src('src/store/paths.ts')};
      import { blobsUnder, decoysCommand, swapRingScript } from ${src('test/helpers/symlink-swap-ring.ts')};
      const SECRET = ${JSON.stringify(SECRET)};
      const hostDir = ${JSON.stringify(join(stateDir, 'host'))};
      mkdirSync(hostDir, { mode: 0o700 });
      writeFileSync(hostDir + '/s', SECRET, { mode: 0o600 });
      execFileSync('setfattr', ['-n', 'user.msbsecret', '-v', SECRET, hostDir + '/s']);
      const reg = new LocalRegistry(${JSON.stringify(kit.reg.root)});
      const store = new StorePaths(${JSON.stringify(join(stateDir, 'store'))});
      const snaps = new Snapshots(store, reg);
      const opts = { capabilities: 'default', warn: () => {} };
      const sh = async (sb, c) => {
        const r = await sb.exec(['/bin/sh', '-c', c], { timeoutMs: 60000 });
        return r.stdout + (r.exitCode ? ' exit ' + r.exitCode + ' ' + r.stderr : '');
      };
      const sb = await openSandbox(reg, store, 'kit/busybox', opts);
      const out = { started: await sh(sb, swapRingScript(hostDir, SECRET.length, ${DIRS})), rounds: [] };
      // every member runs before the first snapshot (waits have no deadline: the test's timeout catches a hang)
      while ((await sh(sb, 'wc -l < /root/ring/pids')).trim() !== '${DIRS}') await new Promise((r) => setTimeout(r, 50));
      for (let i = 0; i < ${ROUNDS}; i++) {
        const snap = await snaps.take(sb).catch((e) => ({ error: String(e?.code ?? e) }));
        if ('error' in snap) { out.rounds.push(snap); continue; }
        const child = await snaps.open(snap.id, opts);
        out.rounds.push({ seen: await sh(child, decoysCommand(${DIRS})) });
        await child.destroy();
      }
      out.leaked = blobsUnder(${JSON.stringify(join(stateDir, 'store', 'snapshots'))}).some(
        (b) => b.includes(SECRET) || b.includes(Buffer.from(SECRET).toString('base64')),
      );
      await sb.destroy();
      console.log(JSON.stringify(out));
      process.exit(0);
      `,
    );
    scenarioWork = r.work;
    const out = r.out as { started: string; rounds: Array<{ seen?: string; error?: string }>; leaked: boolean };
    expect(out.started).toBe('');
    expect(out.rounds.filter((x) => x.error !== undefined)).toEqual([]);
    for (const { seen } of out.rounds) {
      expect(seen).not.toContain(SECRET);
      // a moment's state: each dir whole with its decoy (as d$i, or as x$i mid-swap)
      const decoys = (seen ?? '').split('\n').filter((l) => l !== '');
      expect(decoys).toHaveLength(DIRS);
      for (const d of decoys) expect(d).toMatch(new RegExp(`^\\d{${SECRET.length}}$`));
    }
    expect(out.leaked).toBe(false);
  }, 300_000);
});
