import { access, chmod, mkdir, mkdtemp, readFile, readdir, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { digestHex } from '../cas/digest.js';
import { DigestMismatchError } from '../errors.js';
import { CorruptPackError } from './errors.js';
import { fetchObjects } from './reader.js';
import { packIntoRegistry, prng, randomBytesSeeded, sourceText, writeObject } from '../../test/helpers/pack-objects.js';
import type { PackSource } from './writer.js';

let work: string;
beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), 'pack-corrupt-'));
  await mkdir(join(work, 'src'));
  await mkdir(join(work, 'dest'));
});
afterEach(async () => {
  await rm(work, { recursive: true, force: true });
});

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

async function flipByte(path: string, at: number): Promise<void> {
  const buf = await readFile(path);
  buf[at] = buf[at]! ^ 0x40;
  await chmod(path, 0o644);
  await writeFile(path, buf);
}

describe.each(['inline', 'worker'] as const)('damaged packs (frames decoded %s)', (decoder) => {
  it('a flipped byte inside an object is a DigestMismatchError naming that object and the pack; it is not published', async () => {
    const rand = prng(7);
    // Incompressible content is stored in raw zstd blocks: the flip changes exactly one output byte.
    const victim = await writeObject(join(work, 'src'), 'victim', randomBytesSeeded(200_000, rand));
    const other = await writeObject(join(work, 'src'), 'other', sourceText(10_000, rand));
    const { registry, packs } = await packIntoRegistry(work, [other, victim], { frameBytes: 64 << 10 });
    const { pack, index, packPath } = packs[0]!;
    const entry = index.entries.find((e) => e.digest === victim.digest)!;
    await flipByte(packPath, entry.frameOffset + Math.floor(entry.frameLength / 2));

    const err = await fetchObjects(registry, pack, index.entries, join(work, 'dest'), { decoder }).catch((e: unknown) => e);
    expect((err as Error).message).toContain(victim.digest);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect((err as Error).message).toContain(pack);
    expect(await exists(join(work, 'dest', digestHex(victim.digest)))).toBe(false);
    expect((await readdir(join(work, 'dest'))).filter((n) => n.startsWith('.tmp'))).toEqual([]);
  });

  it('a flipped byte in compressed text fails naming an object of that frame, which is not published', async () => {
    const rand = prng(8);
    const sources: PackSource[] = [];
    for (let i = 0; i < 40; i++) sources.push(await writeObject(join(work, 'src'), `t${i}`, sourceText(8000, rand)));
    const { registry, packs } = await packIntoRegistry(work, sources, { frameBytes: 64 << 10 });
    const { pack, index, packPath } = packs[0]!;
    const frameOffset = index.frames[1]!.offset;
    const inFrame = index.entries.filter((e) => e.frameOffset === frameOffset);
    await flipByte(packPath, frameOffset + Math.floor(index.frames[1]!.length / 2));

    const err = await fetchObjects(registry, pack, inFrame, join(work, 'dest'), { decoder }).catch((e: unknown) => e);
    expect(err instanceof DigestMismatchError || err instanceof CorruptPackError).toBe(true);
    const named = inFrame.filter((e) => (err as Error).message.includes(e.digest));
    expect(named.length).toBeGreaterThan(0);
    for (const e of named) expect(await exists(join(work, 'dest', digestHex(e.digest)))).toBe(false);
  });

  it('a truncated pack fails with CorruptPackError naming the objects it could not extract', async () => {
    const rand = prng(9);
    const sources: PackSource[] = [];
    for (let i = 0; i < 20; i++) sources.push(await writeObject(join(work, 'src'), `t${i}`, randomBytesSeeded(30_000, rand)));
    const { registry, packs } = await packIntoRegistry(work, sources, { frameBytes: 64 << 10 });
    const { pack, index, packPath } = packs[0]!;
    await chmod(packPath, 0o644);
    await truncate(packPath, Math.floor(index.packSize / 2));

    const err = await fetchObjects(registry, pack, index.entries, join(work, 'dest'), { decoder }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CorruptPackError);
    expect((err as Error).message).toMatch(/truncated|ends mid-frame/);
    const lost = index.entries.filter((e) => e.frameOffset + e.frameLength > index.packSize / 2);
    expect(lost.some((e) => (err as Error).message.includes(e.digest))).toBe(true);
    for (const e of lost) expect(await exists(join(work, 'dest', digestHex(e.digest)))).toBe(false);
  });
});
