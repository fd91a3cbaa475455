/**
 * A tree that changes under its capture as a hostile sandbox's upper would: a directory already
 * listed is swapped for a symlink to a host directory holding files of the same names and sizes,
 * and a file is swapped for a FIFO, both between the walk's listing and the reads that follow
 * (the hash of the files after the walk's first yield, and the pack writer's read of every
 * object). The capture reads through held directory fds: it goes on reading the real directory
 * (or fails clearly), never a host file, and a FIFO can neither hang it nor be packed.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../test/helpers/capture-util.js';
import { PackWriter } from '../pack/writer.js';
import { captureLayer, type CapturedObject } from './capture.js';

const FILES = 600;
const SECRET = 'HOST-SECRET-0123456789abcdef';
const name = (i: number): string => `f${String(i).padStart(4, '0')}`;

/** Captures `root` and packs its objects as pushTree does, `before` each object is handed to the writer. */
async function captureAndPack(root: string, work: string, before: (o: CapturedObject) => void): Promise<{ manifest: string; packs: Buffer[] }> {
  const writer = new PackWriter({ tempDir: work });
  const manifestPath = join(work, 'manifest.jsonl');
  try {
    await captureLayer(root, {
      manifestPath,
      onObject: async (o: CapturedObject) => {
        before(o);
        await writer.add(o);
      },
    });
    const packs = await writer.finish();
    return { manifest: readFileSync(manifestPath, 'utf8'), packs: packs.map((p) => execFileSync('zstd', ['-dcq', p.packPath], { maxBuffer: 64 << 20 })) };
  } catch (e) {
    await writer.abort();
    throw e;
  }
}

describe('capture of a tree whose directory becomes a symlink to the host mid-walk', () => {
  const t = tempDir('swap');
  afterAll(() => t.cleanup());

  it('reads on from the directory it listed and packs only its files', async () => {
    const host = join(t.dir, 'host');
    const root = join(t.dir, 'root');
    const work = join(t.dir, 'work');
    for (const d of [host, join(root, 'd'), work]) mkdirSync(d, { recursive: true });
    for (let i = 0; i < FILES; i++) {
      writeFileSync(join(host, name(i)), SECRET);
      writeFileSync(join(root, 'd', name(i)), `${String(i).padStart(SECRET.length - 1, '0')}\n`);
    }
    const secretDigest = createHash('sha256').update(SECRET).digest('hex');
    let swapped = false;
    // the first objects are handed over at the walk's first yield (after 512 entries): d is listed, half of it read
    const got = await captureAndPack(root, work, () => {
      if (swapped) return;
      swapped = true;
      renameSync(join(root, 'd'), join(root, 'x'));
      symlinkSync(host, join(root, 'd'));
    });
    expect(got.manifest).not.toContain(secretDigest);
    for (const p of got.packs) expect(p.includes(SECRET)).toBe(false);
    // every file the capture listed, as it was in the directory it listed
    const files = got.manifest.split('\n').filter((l) => l.includes('"type":"file"'));
    expect(files).toHaveLength(FILES);
    for (const p of got.packs) expect(p.includes(`${String(FILES - 1).padStart(SECRET.length - 1, '0')}\n`)).toBe(true);
  }, 60_000);
});

describe('capture of a tree whose file becomes a FIFO before it is packed', () => {
  const t = tempDir('fifo');
  afterAll(() => t.cleanup());

  it('fails naming the file, without hanging on the FIFO', async () => {
    const root = join(t.dir, 'root');
    const work = join(t.dir, 'work');
    mkdirSync(join(root, 'a'), { recursive: true });
    mkdirSync(work);
    for (let i = 0; i < 10; i++) writeFileSync(join(root, 'a', name(i)), `content ${i}\n`);
    writeFileSync(join(root, 'z'), 'the last file\n');
    // hashed as a file, then a FIFO when the writer reads it
    const err = await captureAndPack(root, work, (o) => {
      if (!o.path.toString().endsWith('/z')) return;
      rmSync(join(root, 'z'));
      execFileSync('mkfifo', [join(root, 'z')]);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(String((err as Error).message)).toMatch(/"z"|\/z\b/);
  }, 60_000);
});
