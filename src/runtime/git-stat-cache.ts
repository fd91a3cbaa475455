/**
 * Git repositories in an environment, with a stat cache that holds in the sandbox. Git's index
 * records each file's ctime and inode number as the build saw them; laid out in a store, every
 * file has others (a hardlink into the object pool, linked at lay-out time), so the first `git
 * status`, `diff` or `add` in every new sandbox re-read and re-hashed the whole work tree: 3 s for
 * 6,000 files here, most of a create-to-first-command. The sandbox sees a lower layer's own inode
 * number and ctime (overlayfs passes them through; git ignores st_dev), so the index is given those
 * of the laid-out files, for each entry whose mtime and size the manifest says the file still has
 * (what git itself trusts a stat for), and written into the new sandbox before its first command,
 * as a `git update-index --refresh` would, but without reading a file.
 *
 * Which indexes and files a stack of layers holds is read from the layers' manifests once per
 * stack (the manifest says what each path is in which layer, and a laid-out layer's paths hold no
 * symlink, so nothing is stat'ed outside the layers). The stat values change when a lay-out links
 * the same pool file again (a link updates the inode's ctime): the patched index is kept until the
 * store's layer directory changes (its mtime moves with every lay-out and removal), then made
 * again. A stale value only costs what it saves: git re-hashes that file.
 */
import { lstatSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type IndexEntry, parseGitIndex, resealIndex, setEntryStat } from './git-index.js';

export interface StackLayer {
  /** The laid-out tree. */
  dir: string;
  /** Its manifest in the store. */
  manifest: string;
}

/** A file as the merged stack shows it: the layer holding its topmost entry. */
interface Seen {
  dir: string;
  type: 'file' | 'symlink' | 'other';
  mtimeNs: bigint;
  size: number;
  mode: number;
  uid: number;
  gid: number;
}

interface IndexPlan {
  /** Path of the index in the sandbox, without the leading `/`. */
  path: string;
  original: Buffer;
  owner: { uid: number; gid: number; mode: number };
  /** Entries whose file the manifest shows unchanged, each with the host path to stat. */
  entries: Array<{ offset: number; host: string; uid: number; gid: number }>;
  parsed: NonNullable<ReturnType<typeof parseGitIndex>>;
}

/** What one index file of a sandbox should hold before its first command. */
export interface IndexFix {
  path: string;
  data: Buffer;
  uid: number;
  gid: number;
  mode: number;
}

type ManifestLine = {
  type?: string;
  path?: string;
  mtime?: string;
  size?: number;
  mode?: number;
  uid?: number;
  gid?: number;
  target?: string;
  opaque?: boolean;
};

const INDEX_SUFFIX = '.git/index';
/** Stacks remembered per cache (an environment each; a few KB per thousand files). */
const MAX_STACKS = 256;

function lines(text: string, wanted: (line: string) => boolean): ManifestLine[] {
  const out: ManifestLine[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || !wanted(line)) continue;
    try {
      out.push(JSON.parse(line) as ManifestLine);
    } catch {
      // not a manifest line we can read: the entry is left as git has it
    }
  }
  return out;
}

/**
 * The merged view of the paths under `prefix` (lowest layer first): path -> what a sandbox sees,
 * from the lines `wanted` picks, and every whiteout and opaque dir (they hide what lies below).
 */
function mergedView(texts: readonly string[], layers: readonly StackLayer[], prefix: string, wanted: (line: string) => boolean): Map<string, Seen> {
  const view = new Map<string, Seen>();
  /** Directories the layers so far hold: a file over one hides what is under it. */
  const dirs = new Set<string>();
  const hideUnder = (dir: string): void => {
    if (prefix.startsWith(`${dir}/`)) view.clear();
    else for (const p of [...view.keys()]) if (p.startsWith(`${dir}/`)) view.delete(p);
  };
  texts.forEach((text, i) => {
    const own = new Map<string, ManifestLine>();
    for (const e of lines(text, (l) => wanted(l) || l.includes('"type":"whiteout"') || l.includes('"opaque":true'))) {
      if (typeof e.path !== 'string') continue;
      // what this layer hides of the lower ones
      if (e.type === 'whiteout') {
        view.delete(e.path);
        hideUnder(e.path);
      } else if (e.type === 'dir' && e.opaque === true) hideUnder(e.path);
      if (e.path.startsWith(prefix)) own.set(e.path, e);
    }
    for (const [path, e] of own) {
      if (e.type === 'whiteout') continue;
      if (e.type === 'dir') {
        dirs.add(path);
        continue;
      }
      if (dirs.delete(path)) hideUnder(path); // a file where a lower layer had a directory
      // a hardlink has its target's inode, mtime and size
      const meta = e.type === 'hardlink' && typeof e.target === 'string' ? own.get(e.target) : e;
      const type = meta?.type === 'file' ? 'file' : meta?.type === 'symlink' ? 'symlink' : 'other';
      let mtimeNs = -1n;
      try {
        mtimeNs = BigInt(meta?.mtime ?? '-1');
      } catch {
        // unreadable: matches no index entry
      }
      view.set(path, {
        dir: layers[i]!.dir,
        type,
        mtimeNs,
        size: type === 'symlink' ? Buffer.byteLength(meta?.target ?? '') : (meta?.size ?? -1),
        mode: meta?.mode ?? 0,
        uid: meta?.uid ?? 0,
        gid: meta?.gid ?? 0,
      });
    }
  });
  return view;
}

/** Whether git would trust a stat of `seen` for `e`: same kind, exec bit, mtime and size (as git stores them). */
function unchanged(e: IndexEntry, seen: Seen): boolean {
  const kind = e.mode >>> 12;
  if (seen.type === 'file' ? kind !== 0o10 || ((e.mode & 0o100) !== 0) !== ((seen.mode & 0o100) !== 0) : seen.type !== 'symlink' || kind !== 0o12) return false;
  return (
    Number((seen.mtimeNs / 1_000_000_000n) & 0xffffffffn) === e.mtimeSec &&
    Number(seen.mtimeNs % 1_000_000_000n) === e.mtimeNsec &&
    seen.size >>> 0 === e.size &&
    // git smudges a racily clean entry to size 0: it re-hashes that one whatever its stat
    !(e.size === 0 && seen.size !== 0)
  );
}

async function planStack(layers: readonly StackLayer[]): Promise<IndexPlan[]> {
  const texts: string[] = [];
  for (const l of layers) texts.push(await readFile(l.manifest, 'utf8'));
  if (!texts.some((t) => t.includes(`${INDEX_SUFFIX}"`))) return [];
  // the indexes the sandbox sees: `.git/index` files whose topmost entry is a file
  const indexes = mergedView(texts, layers, '', (l) => l.includes(`${INDEX_SUFFIX}"`));
  const plans: IndexPlan[] = [];
  for (const [path, seen] of indexes) {
    if (!(path === INDEX_SUFFIX || path.endsWith(`/${INDEX_SUFFIX}`)) || seen.type !== 'file') continue;
    const original = await readFile(join(seen.dir, path)).catch(() => undefined);
    const parsed = original === undefined ? undefined : parseGitIndex(original);
    if (original === undefined || parsed === undefined) continue;
    const worktree = path.slice(0, -INDEX_SUFFIX.length);
    const quoted = `"path":${JSON.stringify(worktree).slice(0, -1)}`;
    const files = mergedView(texts, layers, worktree, (l) => l.includes(quoted));
    const entries: IndexPlan['entries'] = [];
    for (const e of parsed.entries) {
      const f = files.get(worktree + e.path);
      if (f !== undefined && unchanged(e, f)) entries.push({ offset: e.offset, host: join(f.dir, worktree + e.path), uid: f.uid, gid: f.gid });
    }
    if (entries.length > 0) plans.push({ path, original, owner: { uid: seen.uid, gid: seen.gid, mode: seen.mode & 0o7777 }, entries, parsed });
  }
  return plans;
}

/** The patched indexes of a stack, per stack; see the module's comment. One per server (or per caller). */
export class GitStatCache {
  private readonly plans = new Map<string, Promise<IndexPlan[]>>();
  private readonly fixed = new Map<string, { layersMtimeNs: bigint; fixes: IndexFix[] }>();

  /**
   * What to write into a new sandbox over `layers` (lowest first): one entry per index with
   * entries to refresh, none for an environment without a git repository. `layersDir` is the
   * store's directory of laid-out layers (its mtime says when to stat again).
   */
  async fixes(layers: readonly StackLayer[], layersDir: string): Promise<IndexFix[]> {
    const key = layers.map((l) => l.dir).join('\n');
    let plan = this.plans.get(key);
    if (plan === undefined) {
      if (this.plans.size >= MAX_STACKS) {
        const oldest = this.plans.keys().next().value!;
        this.plans.delete(oldest);
        this.fixed.delete(oldest);
      }
      plan = planStack(layers);
      this.plans.set(key, plan);
      plan.catch(() => this.plans.delete(key));
    }
    const plans = await plan;
    if (plans.length === 0) return [];
    // read before the stats: a lay-out meanwhile moves it, and the next create stats again
    const layersMtimeNs = statSync(layersDir, { bigint: true }).mtimeNs;
    const kept = this.fixed.get(key);
    if (kept?.layersMtimeNs === layersMtimeNs) return kept.fixes;
    const fixes = plans.map((p): IndexFix => {
      const data = Buffer.from(p.original);
      for (const e of p.entries) {
        const st = lstatSync(e.host, { bigint: true, throwIfNoEntry: false });
        if (st === undefined || !(st.isFile() || st.isSymbolicLink())) continue;
        setEntryStat(data, e.offset, { ctimeNs: st.ctimeNs, ino: st.ino, uid: e.uid, gid: e.gid });
      }
      resealIndex(data, p.parsed);
      return { path: p.path, data, ...p.owner };
    });
    this.fixed.set(key, { layersMtimeNs, fixes });
    return fixes;
  }
}
