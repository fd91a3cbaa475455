import { execFileSync } from 'node:child_process';
import { chmodSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { sha256 } from '../cas/digest.js';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { captureAndRead, sh, tempDir } from '../../test/helpers/capture-util.js';
import type { Entry } from './manifest.js';
import { stack } from './stack.js';
import { rng } from '../../test/helpers/rng.js';

// names chosen to collide across layers and to sort around `/` (`a-b` < `a.c` < `a/`)
const NAMES = ['a', 'b', 'a-b', 'a.c', 'c'];

/** A random layer: dirs, files, symlinks, hardlinks, FIFOs, and (above the bottom) whiteouts and opaque dirs. */
function makeLayer(root: string, r: () => number, upper: boolean): void {
  mkdirSync(root);
  const files: string[] = [];
  const fill = (dir: string, depth: number): void => {
    for (const name of NAMES) {
      if (r() < 0.45) continue;
      const p = join(dir, name);
      const u = r();
      if (depth < 3 && u < 0.35) {
        mkdirSync(p);
        if (upper && r() < 0.25) execFileSync('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', p]);
        if (r() < 0.2) chmodSync(p, 0o700);
        fill(p, depth + 1);
      } else if (u < 0.6) {
        writeFileSync(p, `${p.slice(root.length)}:${Math.floor(r() * 3)}`);
        if (r() < 0.3) chmodSync(p, 0o600);
        files.push(p);
      } else if (u < 0.7) {
        symlinkSync(r() < 0.5 ? '../a' : '/abs/target', p);
      } else if (u < 0.78) {
        execFileSync('mkfifo', [p]);
      } else if (u < 0.9 && files.length > 0) {
        linkSync(files[Math.floor(r() * files.length)]!, p);
      } else if (upper) {
        execFileSync('mknod', [p, 'c', '0', '0']);
      }
    }
  };
  fill(root, 0);
}

function norm(e: Entry, byPath: Map<string, Entry>): string {
  const f = e.type === 'hardlink' ? byPath.get(e.target)! : e;
  if (f.type === 'hardlink' || f.type === 'whiteout') throw new Error(`unexpected ${f.type} ${f.path}`);
  const o: Record<string, unknown> = { type: f.type, mode: f.mode, uid: f.uid, gid: f.gid, mtime: f.mtime };
  if (f.type === 'file') Object.assign(o, { size: f.size, digest: f.digest });
  if (f.type === 'symlink') o.target = f.target;
  return JSON.stringify(o);
}

/**
 * What a reader of the mounted tree sees. Not `captureLayer`: overlayfs lists a lower layer's
 * whiteout that sits in a directory it does not merge (one over a lower non-directory) but
 * cannot stat it, so such phantom names are skipped here as a reader would have to.
 */
function observe(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string): void => {
    const names = readdirSync(join(root, rel)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    for (const n of names) {
      const p = rel === '' ? n : `${rel}/${n}`;
      let st;
      try {
        st = lstatSync(join(root, p), { bigint: true });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw e;
      }
      const o: Record<string, unknown> = { mode: Number(st.mode & 0o7777n), uid: Number(st.uid), gid: Number(st.gid), mtime: st.mtimeNs.toString() };
      if (st.isDirectory()) o.type = 'dir';
      else if (st.isFile()) Object.assign(o, { type: 'file', size: Number(st.size), digest: sha256(readFileSync(join(root, p))) });
      else if (st.isSymbolicLink()) Object.assign(o, { type: 'symlink', target: readlinkSync(join(root, p)) });
      else if (st.isFIFO()) o.type = 'fifo';
      else o.type = 'other';
      const { type, mode, uid, gid, mtime, ...rest } = o;
      out.set(p, JSON.stringify({ type, mode, uid, gid, mtime, ...rest }));
      if (st.isDirectory()) walk(p);
    }
  };
  walk('');
  return new Map([...out].sort((a, b) => Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0]))));
}

describe('stacking random layers matches overlayfs', () => {
  const t = tempDir('stackrand');
  afterAll(() => {
    sh(`for m in ${t.dir}/*/merged; do umount "$m" 2>/dev/null || true; done`);
    if (process.env.KEEP === undefined) t.cleanup();
  });

  it.each([1, 2, 3, 4, 5, 6, 7, 8])('seed %i', async (seed) => {
    const r = rng(seed * 2654435761);
    const base = join(t.dir, `s${seed}`);
    mkdirSync(base);
    const names = ['L0', 'L1', 'L2'];
    names.forEach((n, i) => makeLayer(join(base, n), r, i > 0));
    const layers = [];
    for (const n of names) layers.push((await captureAndRead(join(base, n), join(base, `${n}.jsonl`), { overlayUpper: true, hashWorkers: 0 })).list);
    const stacked = stack(layers);
    const merged = join(base, 'merged');
    mkdirSync(merged);
    sh(`mount -t overlay overlay -o ro,lowerdir=${join(base, 'L2')}:${join(base, 'L1')}:${join(base, 'L0')} ${merged}`);
    let expected;
    try {
      expected = observe(merged);
    } finally {
      sh(`umount ${merged}`);
    }
    const byPath = new Map(stacked.map((s) => [s.entry.path, s.entry]));
    const actual = new Map(stacked.map((s) => [s.entry.path, norm(s.entry, byPath)]));
    expect(actual.size).toBeGreaterThan(3);
    expect([...actual.keys()]).toEqual([...expected.keys()]);
    for (const [p, v] of expected) expect({ p, v: actual.get(p) }).toEqual({ p, v });
  });
});
