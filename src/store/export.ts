/** `export`: an environment's merged tree as an ordinary directory, every file its own copy. */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, rename, rm, rmdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { InvalidInputError } from '../errors.js';
import { readManifest } from '../layer/manifest-read.js';
import type { Entry } from '../layer/manifest.js';
import { stack } from '../layer/stack.js';
import type { Registry } from '../registry/registry.js';
import { isErrno } from '../util/fs.js';
import { materialize } from './materialize.js';
import type { StorePaths } from './paths.js';
import { type PullOptions, ensureManifest, pullEnv } from './pull.js';

export interface ExportOptions extends PullOptions {
  /**
   * Keep setuid/setgid bits, file capabilities and device nodes (root only). The tree is then as
   * dangerous as the layer, so its top directory is made 0700 before anyone could enter it.
   */
  preserveSpecial?: boolean;
}

/** Dropped from an export unless asked for: what lets a file grant privileges. */
const PRIVILEGE_XATTRS = ['security.capability'];

/**
 * The entry as a tree for the user who asked holds it: no setuid/setgid bits, no file
 * capabilities, no device nodes (null), the rest as recorded.
 */
export function plainEntry(e: Entry): Entry | null {
  if (e.type === 'char' || e.type === 'block') return null;
  if (e.type === 'hardlink' || e.type === 'whiteout') return e;
  const mode = e.mode & ~0o6000;
  const names = Object.keys(e.xattrs ?? {});
  const kept = names.filter((n) => !PRIVILEGE_XATTRS.includes(n));
  if (mode === e.mode && kept.length === names.length) return e;
  const { xattrs, ...rest } = e;
  return { ...rest, mode, ...(kept.length === 0 ? {} : { xattrs: Object.fromEntries(kept.map((n) => [n, xattrs![n]!])) }) };
}

export async function exportEnv(
  reg: Registry,
  store: StorePaths,
  ref: string,
  dest: string,
  opts: ExportOptions = {},
): Promise<{ files: number; entries: number }> {
  const target = resolve(dest);
  const preserve = opts.preserveSpecial === true;
  if (preserve && process.getuid?.() !== 0) {
    throw new InvalidInputError(
      '--preserve-special needs root',
      'export without it: setuid/setgid bits, file capabilities and device nodes are left out of a tree for a user',
    );
  }
  const existing = await readdir(target).catch((e: unknown) => (isErrno(e, 'ENOENT') ? null : Promise.reject(e)));
  if (existing !== null && existing.length > 0)
    throw new InvalidInputError(`export target ${target} exists and is not empty`, 'choose a new or empty directory');
  const pulled = await pullEnv(reg, store, ref, { ...opts, idShift: 0 });
  const layers: Entry[][] = [];
  for (const l of pulled.env.layers) {
    const path = await ensureManifest(reg, store, l);
    const entries: Entry[] = [];
    for await (const e of readManifest(path, `layer ${l.digest}`)) entries.push(e);
    layers.push(entries);
  }
  const merged: Entry[] = [];
  for (const { entry } of stack(layers)) {
    const e = entry.type === 'dir' && entry.opaque ? { ...entry, opaque: undefined } : entry;
    const kept = preserve ? e : plainEntry(e);
    if (kept !== null) merged.push(kept);
  }
  // Built beside the target, inside a 0700 directory of its own (no one enters the tree while it is
  // laid out), and renamed, so an interrupted export leaves no half tree at DEST.
  const wrap = join(dirname(target), `.${randomBytes(6).toString('hex')}.minisandbox-export`);
  await mkdir(wrap, { mode: 0o700 });
  const tmp = join(wrap, 'tree');
  try {
    const stats = await materialize(store, iter(merged), tmp, { idShift: 0, share: false, whiteouts: 'chardev', overlayXattrNs: 'user' });
    if (preserve) await chmod(tmp, 0o700);
    if (existing !== null) await rmdir(target);
    await rename(tmp, target);
    return { files: stats.files, entries: merged.length };
  } finally {
    await rm(wrap, { recursive: true, force: true });
  }
}

async function* iter<T>(xs: T[]): AsyncIterable<T> {
  yield* xs;
}
