/**
 * A pull says how far it is while it runs: the compressed bytes it fetches and the uncompressed
 * bytes it lays out, each of a total known once the layer's fetch is planned, growing as frames
 * arrive and ending equal to what the result reports. (`pull` of a 292 MiB environment showed
 * nothing for 3.5 s, then "fetched 292.5 MiB": the uncompressed size, of a 99 MB registry.)
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asRemote } from '../../test/helpers/remote-registry.js';
import { pushTree } from '../publish/push.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from './paths.js';
import { type PrefetchProgress, prefetch } from './prefetch.js';

const work = mkdtempSync(join(tmpdir(), 'ms-pull-progress-'));
const registry = new LocalRegistry(join(work, 'registry'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(async () => {
  // half incompressible, half text that zstd shrinks a lot: several frames, two sizes that differ
  const src = join(work, 'src');
  mkdirSync(src);
  for (let i = 0; i < 6; i++) {
    writeFileSync(join(src, `random-${i}`), randomBytes(1 << 20));
    writeFileSync(join(src, `text-${i}`), `line ${i} of a log that repeats itself\n`.repeat(30_000));
  }
  await pushTree(registry, new StorePaths(join(work, 'push')), src, { tag: 'p/mixed' });
});

describe('pull progress', () => {
  for (const [name, reg] of [
    ['a local registry (the helper reads the packs)', registry],
    ['a remote registry (frames come through node)', asRemote(registry)],
  ] as const) {
    it(`from ${name}, counts compressed and laid-out bytes up to their totals`, async () => {
      const events: PrefetchProgress[] = [];
      const store = new StorePaths(join(work, `store-${events.length}-${Math.random().toString(36).slice(2)}`));
      const [r] = await prefetch(reg, store, ['p/mixed'], { idShift: 0, jobs: 1, budgetBytes: 1 << 30, onProgress: (p) => events.push(p) });
      expect(r).toMatchObject({ status: 'pulled' });
      const fetching = events.filter((e) => e.phase === 'fetch');
      // bytes arrive in steps while the pull runs, never going back
      const steps = new Set(fetching.map((e) => e.compressedDoneBytes));
      expect(steps.size).toBeGreaterThanOrEqual(3);
      for (let i = 1; i < events.length; i++) {
        expect(events[i]!.doneBytes).toBeGreaterThanOrEqual(events[i - 1]!.doneBytes);
        expect(events[i]!.compressedDoneBytes).toBeGreaterThanOrEqual(events[i - 1]!.compressedDoneBytes);
      }
      const last = events.at(-1)!;
      expect(last.phase).toBe('done');
      expect(last).toMatchObject({ doneBytes: last.totalBytes, compressedDoneBytes: last.compressedTotalBytes });
      // what the result says is what the bar counted: 12 MiB laid out, well under that fetched
      expect(r!.fetchedBytes).toBe(last.totalBytes);
      expect(r!.fetchedCompressedBytes).toBe(last.compressedTotalBytes);
      expect(r!.fetchedBytes).toBeGreaterThanOrEqual(12 << 20);
      expect(r!.fetchedCompressedBytes).toBeLessThan(r!.fetchedBytes * 0.7);
      expect(r!.fetchedCompressedBytes).toBeGreaterThan(6 << 20);
    });
  }
});
