/**
 * Test and benchmark helper: writes object files with deterministic pseudo-random contents of a
 * given kind and returns them as pack sources (hashed, as capture would).
 */
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { digestHex, type Digest } from '../../src/cas/digest.js';
import { LocalRegistry } from '../../src/registry/local.js';
import { parsePackIndex, type PackIndex } from '../../src/pack/pack-index.js';
import { publishPacks } from '../../src/pack/publish.js';
import { PackWriter, type PackSource } from '../../src/pack/writer.js';

export { rng as prng } from './rng.js';

const WORDS = [
  'const',
  'return',
  'function',
  'import',
  'export',
  'if',
  'else',
  'for',
  'while',
  'self',
  'def',
  'class',
  'value',
  'result',
  'error',
  'options',
  'module',
  'data',
  'index',
  'length',
  'string',
  'number',
  'await',
  'async',
  '=',
  '(',
  ')',
  '{',
  '}',
  '[',
  ']',
  ';',
  ':',
  ',',
  '.',
  '+',
  '-',
  '*',
  '/',
  '==',
  '!=',
  '=>',
  'null',
  'None',
  'True',
];

/** Source-like text: words from a small vocabulary, indented lines (compresses about 4-6x, like code). */
export function sourceText(size: number, rand: () => number): Buffer {
  const parts: string[] = [];
  let n = 0;
  while (n < size) {
    const indent = ' '.repeat(2 * Math.floor(rand() * 4));
    const words: string[] = [];
    const count = 1 + Math.floor(rand() * 10);
    for (let i = 0; i < count; i++) {
      const w = WORDS[Math.floor(rand() * WORDS.length)]!;
      words.push(rand() < 0.15 ? `${w}${Math.floor(rand() * 1000)}` : w);
    }
    const line = `${indent}${words.join(' ')}\n`;
    parts.push(line);
    n += line.length;
  }
  return Buffer.from(parts.join('')).subarray(0, size);
}

/** Incompressible bytes (compiled binaries, archives, images). */
export function randomBytesSeeded(size: number, rand: () => number): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i + 4 <= size; i += 4) b.writeUInt32LE(Math.floor(rand() * 4294967296), i);
  for (let i = size - (size % 4); i < size; i++) b[i] = Math.floor(rand() * 256);
  return b;
}

export async function writeObject(dir: string, name: string, data: Buffer): Promise<PackSource> {
  const path = join(dir, name);
  await writeFile(path, data);
  const digest: Digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
  return { digest, size: data.length, path };
}

/** Packs `sources` into a fresh local registry directory; returns the registry and parsed indexes. */
export async function packIntoRegistry(
  root: string,
  sources: PackSource[],
  opts: { frameBytes?: number; targetPackBytes?: number } = {},
): Promise<{ registry: LocalRegistry; packs: Array<{ pack: Digest; index: PackIndex; packPath: string }> }> {
  const tmp = join(root, 'packtmp');
  await mkdir(tmp, { recursive: true });
  const w = new PackWriter({ tempDir: tmp, ...opts });
  for (const s of sources) await w.add(s);
  const written = await w.finish();
  const registry = new LocalRegistry(join(root, 'registry'));
  await publishPacks(registry, written);
  return {
    registry,
    packs: written.map((p) => ({
      pack: p.pack,
      index: parsePackIndex(p.indexBytes, p.index),
      packPath: join(registry.root, 'blobs', 'sha256', digestHex(p.pack)),
    })),
  };
}
