import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { captureAndRead, sh, tempDir } from '../../test/helpers/capture-util.js';
import type { Entry } from './manifest.js';
import { stack } from './stack.js';

/**
 * One line per path describing what a reader of the merged tree sees: hardlinks resolved to
 * their file, so the comparison does not depend on how each side groups inodes.
 */
function view(entries: readonly Entry[]): Map<string, string> {
  const byPath = new Map(entries.map((e) => [e.path, e]));
  const out = new Map<string, string>();
  for (const e0 of entries) {
    let e = e0;
    if (e.type === 'hardlink') {
      const t = byPath.get(e.target);
      if (t === undefined) throw new Error(`hardlink ${e.path} -> missing ${e.target}`);
      e = { ...t, path: e.path };
    }
    const { path, ...rest } = e;
    out.set(path, JSON.stringify(rest, Object.keys(rest).sort()));
  }
  return out;
}

const LAYERS = `
  mkdir L0 L1 L2 merged
  # bottom
  mkdir -p L0/etc/sub L0/keep L0/gone/deep L0/dir2f L0/hl L0/opq
  printf a > L0/etc/a; printf b > L0/etc/b; printf x > L0/etc/sub/x
  printf k > L0/keep/k1; printf g1 > L0/gone/g1; printf g2 > L0/gone/deep/g2
  printf was-file > L0/f2dir; printf in > L0/dir2f/inner
  printf linked > L0/hl/t; ln L0/hl/t L0/hl/u; ln L0/hl/t L0/hl/v
  printf kept-link > L0/hl2a; ln L0/hl2a L0/hl2b
  ln -s etc/a L0/sl
  printf o1 > L0/opq/o1; printf o2 > L0/opq/o2
  setfattr -n user.color -v blue L0/etc/b
  mkfifo L0/pipe
  # middle: deletions, opaque dir, type changes
  mkdir -p L1/etc L1/opq L1/f2dir L1/hl
  mknod L1/etc/a c 0 0; mknod L1/gone c 0 0; mknod L1/hl/t c 0 0
  printf c > L1/etc/c
  setfattr -n trusted.overlay.opaque -v y L1/opq; printf new > L1/opq/new
  printf c > L1/f2dir/c
  printf now-file > L1/dir2f
  chmod 700 L1/hl
  # top: re-add a deleted path, modify, dir over symlink, a hardlink group of its own
  mkdir -p L2/etc L2/keep L2/sl L2/top
  printf a-again > L2/etc/a; printf b2 > L2/etc/b; chmod 600 L2/etc/b
  chmod 700 L2/keep
  printf inside > L2/sl/inside
  printf h > L2/top/h1; ln L2/top/h1 L2/top/h2
  touch -d '2020-01-01 00:00:00.5 UTC' L2/etc L1/etc L0/etc L0/hl/t
`;

describe('stacking matches a real overlayfs mount of the same layers', () => {
  const t = tempDir('stack');
  afterAll(() => {
    sh(`umount ${t.dir}/merged 2>/dev/null || true`);
    t.cleanup();
  });

  it('gives the merged tree overlayfs shows: whiteouts, opaque dirs, type changes, surviving hardlinks', async () => {
    sh(`cd ${t.dir}\n${LAYERS}`);
    const layers = [];
    for (const l of ['L0', 'L1', 'L2']) layers.push((await captureAndRead(join(t.dir, l), join(t.dir, `${l}.jsonl`), { overlayUpper: true })).list);
    const stacked = stack(layers);

    sh(`cd ${t.dir} && mount -t overlay overlay -o ro,lowerdir=L2:L1:L0 merged`);
    let merged;
    try {
      merged = await captureAndRead(join(t.dir, 'merged'), join(t.dir, 'merged.jsonl'));
    } finally {
      sh(`umount ${t.dir}/merged`);
    }

    const expected = view(merged.list);
    const actual = view(stacked.map((s) => s.entry));
    expect([...actual.keys()]).toEqual([...expected.keys()]);
    for (const [p, v] of expected) expect({ p, v: actual.get(p) }).toEqual({ p, v });

    // spot checks of the rules, so a bug common to both sides would still show
    const paths = stacked.map((s) => s.entry.path);
    expect(paths).not.toContain('gone');
    expect(paths).not.toContain('gone/g1');
    expect(paths).not.toContain('opq/o1');
    expect(paths).not.toContain('hl/t');
    expect(paths).not.toContain('sl/..');
    const at = (p: string) => stacked.find((s) => s.entry.path === p)!;
    expect(at('etc/a')).toMatchObject({ layer: 2, entry: { type: 'file' } });
    expect(at('etc/sub/x').layer).toBe(0);
    expect(at('f2dir')).toMatchObject({ layer: 1, entry: { type: 'dir' } });
    expect(at('dir2f')).toMatchObject({ layer: 1, entry: { type: 'file' } });
    expect(paths).not.toContain('dir2f/inner');
    expect(at('sl')).toMatchObject({ layer: 2, entry: { type: 'dir' } });
    expect(at('opq').entry).not.toHaveProperty('opaque');
    // the group's file was whited out: the first survivor carries the content, the other links to it
    expect(at('hl/u')).toMatchObject({ layer: 0, entry: { type: 'file', size: 6 } });
    expect(at('hl/v')).toMatchObject({ layer: 0, entry: { type: 'hardlink', target: 'hl/u' } });
    expect(at('hl2b')).toMatchObject({ layer: 0, entry: { type: 'hardlink', target: 'hl2a' } });
    expect(at('top/h2')).toMatchObject({ layer: 2, entry: { type: 'hardlink', target: 'top/h1' } });
  });
});
