import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { captureAndRead, sh, tempDir } from '../../test/helpers/capture-util.js';
import { readTreeXattrs } from './xattr.js';
import { XattrSorter, type Xattrs } from './xattr-sorted.js';

/** Random raw paths: bytes below and above '/', high bytes, tabs and newlines, and paths that prefix others. */
function randomPaths(n: number, seed: number): Buffer[] {
  const rand = rng(seed);
  const alphabet = [0x09, 0x0a, 0x2d, 0x2e, 0x2f, 0x30, 0x41, 0x61, 0x7a, 0xc3, 0xa9, 0xff];
  const seen = new Set<string>();
  const out: Buffer[] = [];
  while (out.length < n) {
    const len = 1 + Math.floor(rand() * 12);
    const base = out.length > 0 && rand() < 0.3 ? out[Math.floor(rand() * out.length)]! : Buffer.alloc(0);
    const tail = Buffer.from(Array.from({ length: len }, () => alphabet[Math.floor(rand() * alphabet.length)]!));
    const p = Buffer.concat([base, tail]);
    const k = p.toString('hex');
    if (!seen.has(k)) {
      seen.add(k);
      out.push(p);
    }
  }
  return out;
}

async function roundTrip(count: number, spillDir: string, spilled: boolean): Promise<void> {
  const paths = randomPaths(count, count);
  const withAttrs = new Map<string, Xattrs>();
  const sorter = new XattrSorter(spillDir);
  // added in generation order (not sorted); every third path has attributes
  for (const [i, p] of paths.entries()) {
    if (i % 3 !== 0) continue;
    const attrs = { 'user.n': Buffer.from(`v${i}`).toString('base64'), [`user.é${i % 5}`]: '' };
    withAttrs.set(p.toString('hex'), attrs);
    if (!sorter.add(p.toString('latin1'), attrs)) await sorter.drained();
  }
  const tree = await sorter.finish();
  expect(tree.spilled).toBe(spilled);
  // asked in canonical order, every path: exactly the attributed ones answer, with their own
  let answered = 0;
  for (const p of [...paths].sort(Buffer.compare)) {
    const got = tree.take(p);
    expect(got, p.toString('hex')).toEqual(withAttrs.get(p.toString('hex')));
    if (got !== undefined) answered++;
  }
  expect(answered).toBe(withAttrs.size);
  tree.close();
}

describe("sorting a tree's extended attributes", () => {
  const t = tempDir('xattr-sort');
  afterAll(() => t.cleanup());

  it('hands a few back in byte-wise path order from memory', async () => {
    await roundTrip(3000, t.dir, false);
    expect(readdirSync(t.dir)).toEqual([]);
  });

  it('hands many back in byte-wise path order through sort and a file, then removes the file', async () => {
    await roundTrip(60_000, t.dir, true); // 20k attributed paths: past the in-memory limit
    expect(readdirSync(t.dir)).toEqual([]);
  }, 600_000);

  it('captures a tree where every file has attributes, with the spill file gone afterwards', async () => {
    const root = join(t.dir, 'tree');
    // 20k files with a label each: past the in-memory limit, as on an SELinux host
    sh(
      `mkdir -p ${root}/a ${root}/b && cd ${root} && seq 1 10000 | sed 's|^|a/f|' | xargs touch && seq 1 10000 | sed ` +
        `'s|^|b/g|' | xargs touch && find . -mindepth 1 -print0 | xargs -0 setfattr -n user.label -v system_u:object_r:usr_t:s0`,
    );
    // the same tree read directly: its attributes take the spill path
    const direct = await readTreeXattrs(root, t.dir);
    expect(direct.spilled).toBe(true);
    direct.close();
    const work = join(t.dir, 'work');
    sh(`mkdir -p ${work}`);
    const c = await captureAndRead(root, join(work, 'm.jsonl'));
    const lbl = Buffer.from('system_u:object_r:usr_t:s0').toString('base64');
    expect(c.list.length).toBe(20_002);
    expect(c.list.every((e) => e.type !== 'hardlink' && e.type !== 'whiteout' && e.xattrs?.['user.label'] === lbl)).toBe(true);
    expect(readdirSync(work)).toEqual(['m.jsonl']);
  }, 600_000);
});
