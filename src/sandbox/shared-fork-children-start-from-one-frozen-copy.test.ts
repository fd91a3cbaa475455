/**
 * forkSandboxShared: the parent's upper is copied once (its processes stopped meanwhile) into a
 * frozen lower that every child mounts under an empty upper: children see the parent's tree at the
 * fork (new files, deletions, replaced dirs), write independently of it and of each other, and the
 * frozen copy is removed once the last sandbox over it is gone. Over shifted busybox layers.
 */
import { existsSync, mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { busyboxSandboxEnv } from '../../test/helpers/busybox-sandbox-env.js';
import { forkSandboxShared, reapStaleSandboxes, type Sandbox } from './index.js';

const kit = busyboxSandboxEnv();

const TREE = 'ls /etc /work /work/d | tr "\\n" " "; cat /work/d/x';

describe('shared fork', () => {
  it('children see the parent state at the fork, write on their own, and the frozen copy goes with the last of them', async () => {
    // with root's namespaced capabilities, so it can chown
    const parent = await kit.create({ capabilities: 'default' });
    let children: Sandbox[] = [];
    try {
      expect(await parent.exec(['/bin/sh', '-c', 'rm /etc/group; mkdir -p /work/d && echo one > /work/d/x && chown 1000:1000 /work/d/x'])).toMatchObject({
        exitCode: 0,
      });
      const want = (await parent.exec(['/bin/sh', '-c', TREE])).stdout;
      const results = await forkSandboxShared(parent, 3, { host: kit.host });
      children = results.flatMap((r) => (r.ok ? [r.sandbox] : []));
      expect(children).toHaveLength(3);
      const frozen = children[0]!.state.lowerDirs.at(-1)!;
      expect(frozen).toMatch(/\/\.fork-/);
      for (const c of children) {
        expect(c.state.forkedFrom).toBe(parent.id);
        expect((await c.exec(['/bin/sh', '-c', TREE])).stdout).toBe(want);
        // owners come through as the sandbox saw them
        expect((await c.exec(['/bin/sh', '-c', 'stat -c %u:%g /work/d/x'])).stdout).toBe('1000:1000\n');
        await c.exec(['/bin/sh', '-c', `echo ${c.id} > /work/d/x`]);
      }
      expect((await children[1]!.exec(['cat', '/work/d/x'])).stdout).toBe(`${children[1]!.id}\n`);
      // the parent goes on where it was, and its later writes reach no child
      await parent.exec(['/bin/sh', '-c', 'echo two > /work/d/x']);
      expect((await children[0]!.exec(['cat', '/work/d/x'])).stdout).toBe(`${children[0]!.id}\n`);
      await parent.destroy();
      await children[0]!.destroy();
      await children[1]!.destroy();
      expect(existsSync(frozen)).toBe(true);
      await children[2]!.destroy();
      expect(existsSync(frozen)).toBe(false);
      expect(readdirSync(kit.stateDir)).toEqual([]);
    } finally {
      await Promise.all([parent, ...children].map((s) => s.destroy()));
    }
  });
});

describe('frozen copies a dead runtime left', () => {
  it('are removed by the reaper once old, unless a live sandbox mounts them', async () => {
    const parent = await kit.create();
    try {
      const [r] = await forkSandboxShared(parent, 1, { host: kit.host });
      if (r === undefined || !r.ok) throw new Error('fork failed');
      const used = r.sandbox.state.lowerDirs.at(-1)!;
      const orphan = join(kit.stateDir, '.fork-sb-dead-0123456789ab');
      mkdirSync(join(orphan, 'work'), { recursive: true });
      writeFileSync(join(orphan, 'work', 'f'), 'x');
      const old = new Date(Date.now() - 3_600_000);
      for (const d of [orphan, used]) utimesSync(d, old, old);
      await reapStaleSandboxes(kit.stateDir);
      expect(existsSync(orphan)).toBe(false);
      expect(existsSync(used)).toBe(true);
      expect((await r.sandbox.exec(['echo', 'alive'])).stdout).toBe('alive\n');
      await r.sandbox.destroy();
    } finally {
      await parent.destroy();
    }
  });
});
