import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { allocateIdRange, liveIdRanges, reapStaleIdRanges, releaseIdRange, resolveIdPool, slotIdMap, type IdPool } from './idpool.js';
import { REPO_ROOT } from '../../test/helpers/sandbox-testkit.js';

let dir: string;
const pool: IdPool = { uidStart: 1_000_000, gidStart: 2_000_000, count: 65536, slots: 3 };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'msb-idpool-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A pid that no longer runs: a child that has exited. */
async function deadPid(): Promise<number> {
  const p = spawn('true');
  await new Promise((r) => p.on('close', r));
  return p.pid!;
}

describe('id range pool', () => {
  it('is carved out of root subordinate ranges, slot 0 (the shared range) excluded', async () => {
    const f = join(dir, 'subuid');
    const g = join(dir, 'subgid');
    await writeFile(f, 'alice:100000:65536\nroot:1000000:1000000000\n');
    await writeFile(g, 'root:1000000:65536000\n');
    expect(resolveIdPool({ subuidFile: f, subgidFile: g })).toEqual({ uidStart: 1_000_000, gidStart: 1_000_000, count: 65536, slots: 999 });
    await writeFile(g, 'root:1000000:65536\n');
    expect(resolveIdPool({ subuidFile: f, subgidFile: g })).toBeUndefined();
    expect(slotIdMap(pool, 2)).toEqual({ uidStart: 1_000_000 + 2 * 65536, gidStart: 2_000_000 + 2 * 65536, count: 65536 });
  });

  it('hands out each slot once, refuses with a hint when all are taken, and takes one back on release', () => {
    const leases = [0, 1, 2].map((i) => allocateIdRange(pool, `sb-${i}`, dir));
    expect(new Set(leases.map((l) => l.slot))).toEqual(new Set([1, 2, 3]));
    expect(() => allocateIdRange(pool, 'sb-x', dir)).toThrow(/no free id range/);
    releaseIdRange(leases[1]!.path, 'sb-1');
    expect(allocateIdRange(pool, 'sb-y', dir).slot).toBe(leases[1]!.slot);
  });

  it('release leaves a slot alone that another sandbox took meanwhile', () => {
    const l = allocateIdRange(pool, 'sb-a', dir);
    releaseIdRange(l.path, 'sb-other');
    expect(liveIdRanges(dir)).toEqual([l.slot]);
  });

  it('reaps slots whose runtime and holder are dead, keeps live ones and leaves no temporary files', async () => {
    const live = allocateIdRange(pool, 'sb-live', dir);
    const deadSlot = live.slot === 1 ? 2 : 1;
    await writeFile(join(dir, String(deadSlot)), JSON.stringify({ sandboxId: 'sb-dead', ownerPid: await deadPid(), holderPid: await deadPid() }));
    expect(reapStaleIdRanges(dir)).toBe(1);
    expect(liveIdRanges(dir)).toEqual([live.slot]);
    expect((await readdir(dir)).sort()).toEqual([String(live.slot)]);
  });

  it('keeps a slot whose runtime died while its holder lives on', async () => {
    await writeFile(join(dir, '1'), JSON.stringify({ sandboxId: 'sb-orphan', ownerPid: await deadPid(), holderPid: process.pid }));
    expect(reapStaleIdRanges(dir)).toBe(0);
    expect(liveIdRanges(dir)).toEqual([1]);
  });

  it('a full pool of dead sandboxes is reaped by the next allocation', async () => {
    for (const s of [1, 2, 3]) await writeFile(join(dir, String(s)), JSON.stringify({ sandboxId: `sb-${s}`, ownerPid: await deadPid() }));
    expect([1, 2, 3]).toContain(allocateIdRange(pool, 'sb-new', dir).slot);
  });

  it('processes allocating at once never share a slot', async () => {
    const big: IdPool = { ...pool, slots: 4 };
    // each holds its slot (stays alive) until every one has reported
    const script = `import { allocateIdRange } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/idpool.ts'))};
      const l = allocateIdRange(${JSON.stringify(big)}, 'sb-' + process.pid, ${JSON.stringify(dir)});
      process.stdout.write(String(l.slot) + '\\n');
      process.stdin.resume();
      process.stdin.on('end', () => process.exit(0));`;
    await writeFile(join(dir, '.x.mts'), script);
    const children = [0, 1, 2, 3].map(() => spawn(join(REPO_ROOT, 'node_modules/.bin/tsx'), [join(dir, '.x.mts')], { stdio: ['pipe', 'pipe', 'inherit'] }));
    try {
      const slots = await Promise.all(
        children.map(
          (p) =>
            new Promise<string>((resolve, reject) => {
              let out = '';
              p.stdout!.on('data', (d: Buffer) => {
                out += d.toString();
                if (out.endsWith('\n')) resolve(out.trim());
              });
              p.on('error', reject);
              p.on('close', (code) => reject(new Error(`exit ${code} before reporting`)));
            }),
        ),
      );
      expect(new Set(slots).size).toBe(4);
    } finally {
      for (const p of children) p.stdin!.end();
      await Promise.all(children.map((p) => new Promise((r) => (p.exitCode === null ? p.on('close', r) : r(null)))));
    }
  }, 60_000);
});
