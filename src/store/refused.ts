/**
 * Layers whose manifest a pull refuses, as this store found them: a pull that refused one, or
 * `verify`. A layer is named by its manifest's digest, so the finding holds for good (under these
 * rules), and `ls` shows the refs that reach such a layer as broken without reading a manifest.
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Digest } from '../cas/digest.js';
import { readTextOrUndefined } from '../util/fs.js';
import { randomHex } from '../util/lazy-crypto.js';
import type { StorePaths } from './paths.js';

/** Whether an error is a refusal of the manifest's content (not of a fetch, a disk or a pack, which may be mended). */
export function isManifestRefusal(e: unknown): boolean {
  return (e as { code?: unknown } | null)?.code === 'UNSAFE_PATH';
}

/** Records why; never fails the caller, whose own error is the one to report. */
export async function recordRefused(store: StorePaths, layer: Digest, why: string): Promise<void> {
  const path = store.refused(layer);
  try {
    await mkdir(dirname(path), { recursive: true });
    await mkdir(store.tmpDir, { recursive: true });
    const tmp = join(store.tmpDir, `refused-${process.pid}-${randomHex(6)}`);
    await writeFile(tmp, `${why}\n`);
    await rename(tmp, path);
  } catch {
    // a store that cannot be written: ls will not know, verify still says
  }
}

/** Why a pull refuses the layer, if this store knows. */
export function refusedWhy(store: StorePaths, layer: Digest): string | undefined {
  return readTextOrUndefined(store.refused(layer))?.trimEnd();
}
