/**
 * Stacking: the merged view of an environment's layers, by overlayfs/OCI rules.
 *
 * - a whiteout deletes its path and everything below it in lower layers;
 * - an opaque directory hides everything below it in lower layers;
 * - a non-directory replaces whatever lower entry has its path, subtree included;
 * - a directory over a lower directory merges with it (the upper one's metadata wins), over a
 *   lower non-directory replaces it;
 * - an upper entry whose parent a lower layer holds as a non-directory replaces that entry too
 *   (the upper layer's tree has a directory there, even if its manifest omits it).
 * Deletions apply to lower layers only, never to the layer's own entries.
 *
 * Hardlinks: a `hardlink` entry names the `file` entry of its group in the same layer. When an
 * upper layer deletes or replaces that file but not the other names, those names still show the
 * file's content (overlayfs shows the lower inode under them): the byte-wise first survivor
 * becomes the group's `file` entry, with the file's metadata, and the others link to it.
 *
 * Limit: this first version holds every merged entry in memory (a few hundred bytes each;
 * a million-entry environment needs some hundreds of MB). Pure: no I/O.
 */
import { InvalidInputError } from '../errors.js';
import type { Entry, FileEntry } from './manifest.js';
import { decodePath } from './path.js';

export interface StackedEntry {
  entry: Entry;
  /** Index (lowest = 0) of the layer that supplies this entry. */
  layer: number;
}

interface Node {
  entry: Entry;
  layer: number;
}

export function stack(layers: ReadonlyArray<Iterable<Entry>>): StackedEntry[] {
  const merged = new Map<string, Node>();
  const children = new Map<string, Set<string>>();
  /** Per layer: the file entries that hardlinks of that layer point at. */
  const linkTargets: Array<Map<string, FileEntry>> = [];

  const removeSubtree = (p: string, self: boolean): void => {
    const todo = [p];
    while (todo.length > 0) {
      const q = todo.pop()!;
      const kids = children.get(q);
      if (kids !== undefined) {
        for (const k of kids) todo.push(k);
        children.delete(q);
      }
      if (q !== p || self) {
        if (merged.delete(q)) children.get(parentOf(q))?.delete(q);
      }
    }
  };

  layers.forEach((layer, li) => {
    const entries = [...layer];
    const files = new Map<string, FileEntry>();
    const targets = new Map<string, FileEntry>();
    linkTargets.push(targets);
    // deletions against the lower layers first, so none touches this layer's own entries
    for (const e of entries) {
      const lower = merged.get(e.path);
      if (e.type === 'whiteout') removeSubtree(e.path, true);
      else if (e.type === 'dir') {
        if (lower !== undefined && lower.entry.type !== 'dir') removeSubtree(e.path, true);
        else if (e.opaque === true) removeSubtree(e.path, false);
      } else removeSubtree(e.path, true);
      for (let a = parentOf(e.path); a !== ''; a = parentOf(a)) {
        const n = merged.get(a);
        if (n !== undefined && n.entry.type !== 'dir') removeSubtree(a, true);
      }
      if (e.type === 'file') files.set(e.path, e);
      if (e.type === 'hardlink') {
        const t = files.get(e.target);
        if (t === undefined)
          throw new InvalidInputError(
            `layer ${li}: hardlink ${JSON.stringify(e.path)} targets ${JSON.stringify(e.target)}, which is not an earlier file entry of that layer`,
          );
        targets.set(t.path, t);
      }
    }
    for (const e of entries) {
      if (e.type === 'whiteout') continue;
      let entry: Entry = e;
      if (e.type === 'dir' && e.opaque === true) {
        // the merged view is a plain tree: opacity was applied above
        const { opaque: _opaque, ...plain } = e;
        entry = plain;
      }
      merged.set(e.path, { entry, layer: li });
      const parent = parentOf(e.path);
      let kids = children.get(parent);
      if (kids === undefined) children.set(parent, (kids = new Set()));
      kids.add(e.path);
    }
  });

  repairHardlinks(merged, linkTargets);

  const out = [...merged.values()].map((n) => ({ n, key: decodePath(n.entry.path) }));
  out.sort((a, b) => Buffer.compare(a.key, b.key));
  return out.map(({ n }) => ({ entry: n.entry, layer: n.layer }));
}

/** `stack` over manifests as `readManifest` yields them (lowest layer first). */
export async function stackManifests(layers: ReadonlyArray<AsyncIterable<Entry>>): Promise<StackedEntry[]> {
  const all: Entry[][] = [];
  for (const l of layers) {
    const es: Entry[] = [];
    for await (const e of l) es.push(e);
    all.push(es);
  }
  return stack(all);
}

/** Re-roots hardlink groups whose `file` entry an upper layer removed or replaced. */
function repairHardlinks(merged: Map<string, Node>, linkTargets: ReadonlyArray<Map<string, FileEntry>>): void {
  // (layer, old target) -> surviving names, collected in one pass
  const orphans = new Map<string, { layer: number; file: FileEntry; names: string[] }>();
  for (const n of merged.values()) {
    const e = n.entry;
    if (e.type !== 'hardlink') continue;
    const t = merged.get(e.target);
    if (t !== undefined && t.layer === n.layer) continue;
    const key = `${n.layer}\0${e.target}`;
    let g = orphans.get(key);
    if (g === undefined) {
      const file = linkTargets[n.layer]!.get(e.target)!;
      orphans.set(key, (g = { layer: n.layer, file, names: [] }));
    }
    g.names.push(e.path);
  }
  for (const g of orphans.values()) {
    g.names.sort((a, b) => Buffer.compare(decodePath(a), decodePath(b)));
    const [first, ...rest] = g.names;
    merged.set(first!, { entry: { ...g.file, path: first! }, layer: g.layer });
    for (const p of rest) merged.set(p, { entry: { type: 'hardlink', path: p, target: first! }, layer: g.layer });
  }
}

function parentOf(p: string): string {
  const i = p.lastIndexOf('/');
  return i < 0 ? '' : p.slice(0, i);
}
