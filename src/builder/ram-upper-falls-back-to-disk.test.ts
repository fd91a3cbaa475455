/**
 * Build uppers in RAM: the size policy, and a build that outgrows its RAM upper running again on
 * disk (real build sandboxes on the hermetic busybox base).
 */
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadRecipeCatalog } from '../recipe/catalog.js';
import { LocalRegistry } from '../registry/local.js';
import { openSandbox } from '../runtime/open.js';
import { StorePaths } from '../store/paths.js';
import { executePlan } from './execute.js';
import { planRecipe } from './plan.js';
import { availableMemory, ramUpperBytes } from './upper.js';

const MiB = 1 << 20;

describe('the RAM upper size policy', () => {
  it('shares half the available memory among the concurrent builds, and uses disk below 512 MiB each', () => {
    expect(ramUpperBytes(1, 16384 * MiB)).toBe(8192 * MiB);
    expect(ramUpperBytes(4, 16384 * MiB)).toBe(2048 * MiB);
    expect(ramUpperBytes(16, 16384 * MiB)).toBe(512 * MiB);
    expect(ramUpperBytes(17, 16384 * MiB)).toBe(0);
    expect(ramUpperBytes(1, 800 * MiB)).toBe(0);
    // whole MiB, so the tmpfs size option is exact
    expect(ramUpperBytes(3, 10_000 * MiB + 12345) % MiB).toBe(0);
  });

  it('reads MemAvailable (kB) from meminfo', () => {
    expect(availableMemory('MemTotal:       24684176 kB\nMemFree:        21737888 kB\nMemAvailable:   23336724 kB\n')).toBe(23336724 * 1024);
  });
});

describe('a build that outgrows its RAM upper', () => {
  const work = mkdtempSync(join(tmpdir(), 'ms-ramupper-'));
  chmodSync(work, 0o755);
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  const reg = new LocalRegistry(join(work, 'registry'));
  const store = new StorePaths(join(work, 'store'));
  const opts = { registry: reg, store, logDir: join(work, 'logs'), jobs: 1, keepGoing: false, force: false, timeoutMs: 120_000 };

  it('runs again with its upper on disk and publishes everything it wrote', async () => {
    cpSync(resolve('recipes/test/base.yaml'), join(work, 'base.yaml'));
    writeFileSync(
      join(work, 'big.yaml'),
      [
        'kind: env',
        'name: big-env',
        'parent: base.yaml',
        'network: false',
        'commands:',
        '  - dd if=/dev/zero of=/big bs=1048576 count=12',
        '  - echo done > /done',
        '',
      ].join('\n'),
    );
    const { catalog, root } = await loadRecipeCatalog(join(work, 'big.yaml'));
    // 4 MiB of RAM cannot hold the 12 MiB file: the first run fails on ENOSPC, the second is on disk
    const rows = await executePlan(planRecipe(catalog, root.source, 'test/big'), { ...opts, ramUpperBytes: 4 * MiB });
    const env = rows.find((r) => r.kind === 'env')!;
    expect(env.status).toBe('built');
    const log = readFileSync(env.log!, 'utf8');
    expect(log).toMatch(/upper in RAM, up to 4 MiB/);
    expect(log).toMatch(/more than its 4 MiB RAM upper holds; building again with the upper on disk/);
    const sb = await openSandbox(reg, store, 'test/big');
    try {
      const o = await sb.exec(['/bin/sh', '-c', 'wc -c < /big; cat /done']);
      expect(o.stdout.split('\n').map((l) => l.trim())).toEqual([String(12 * MiB), 'done', '']);
    } finally {
      await sb.destroy();
    }
  });

  it('a build that fits is captured from RAM, with the same files as on disk', async () => {
    const copy = join(work, 'env');
    cpSync(resolve('recipes/test'), copy, { recursive: true, filter: (src) => !src.includes('/repos') });
    const plan = (tag: string) => loadRecipeCatalog(join(copy, 'env.yaml')).then((c) => planRecipe(c.catalog, c.root.source, tag));
    const ram = (await executePlan(await plan('test/ram'), { ...opts, force: true, ramUpperBytes: 64 * MiB })).find((r) => r.kind === 'env')!;
    // read now: both builds are of one node, whose log is its latest build's
    const ramLog = readFileSync(ram.log!, 'utf8');
    const disk = (await executePlan(await plan('test/disk'), { ...opts, force: true, ramUpperBytes: 0 })).find((r) => r.kind === 'env')!;
    expect([ram.status, disk.status]).toEqual(['built', 'built']);
    expect(ramLog).toMatch(/upper in RAM/);
    const listing = async (ref: string): Promise<string> => {
      const sb = await openSandbox(reg, store, ref);
      try {
        // contents, modes and owners of what the env wrote (mtimes differ between two builds)
        return (await sb.exec(['/bin/sh', '-c', 'cd /opt/tool && ls -ln . | sed "s/  */ /g" | cut -d" " -f1,3,4,5,9 && cat * /etc/greeting'])).stdout;
      } finally {
        await sb.destroy();
      }
    };
    const [a, b] = [await listing('test/ram'), await listing('test/disk')];
    expect(a).toContain('built');
    expect(a).toBe(b);
  });
});
