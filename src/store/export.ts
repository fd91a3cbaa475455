/** `export`: an environment's merged tree as an ordinary directory, every file its own copy. */
import { randomBytes } from 'node:crypto';
import { readdir, rename, rm, rmdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { InvalidInputError } from '../errors.js';
import { readManifest } from '../layer/capture.js';
import type { Entry } from '../layer/manifest.js';
import { stack } from '../layer/stack.js';
import type { Registry } from '../registry/registry.js';
import { isErrno } from '../util/fs.js';
import { materialize } from './materialize.js';
import type { StorePaths } from './paths.js';
import { type PullOptions, ensureManifest, pullEnv } from './pull.js';

export async function exportEnv(reg: Registry, store: StorePaths, ref: string, dest: string, opts: PullOptions = {}): Promise<{ files: number; entries: number }> {
  const target = resolve(dest);
  const existing = await readdir(target).catch((e: unknown) => (isErrno(e, 'ENOENT') ? null : Promise.reject(e)));
  if (existing !== null && existing.length > 0) throw new InvalidInputError(`export target ${target} exists and is not empty`, 'choose a new or empty directory');
  const pulled = await pullEnv(reg, store, ref, { ...opts, idShift: 0 });
  const layers: Entry[][] = [];
  for (const l of pulled.env.layers) {
    const path = await ensureManifest(reg, store, l);
    const entries: Entry[] = [];
    for await (const e of readManifest(path, `layer ${l.digest}`)) entries.push(e);
    layers.push(entries);
  }
  const merged = stack(layers).map(({ entry }) => (entry.type === 'dir' && entry.opaque ? { ...entry, opaque: undefined } : entry));
  // Built beside the target and renamed, so an interrupted export leaves no half tree at DEST.
  const tmp = join(dirname(target), `.${randomBytes(6).toString('hex')}.minisandbox-export`);
  try {
    const stats = await materialize(store, iter(merged), tmp, { idShift: 0, share: false, whiteouts: 'chardev', overlayXattrNs: 'user' });
    if (existing !== null) await rmdir(target);
    await rename(tmp, target);
    return { files: stats.files, entries: merged.length };
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
}

async function* iter<T>(xs: T[]): AsyncIterable<T> {
  yield* xs;
}
