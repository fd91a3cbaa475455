/**
 * Real files from this machine (/usr/share, /usr/lib, the checkout's node_modules: text, docs,
 * ELF binaries) for benchmark trees whose size mix and compressibility look like real installs.
 * Breadth-first and sorted, so the same machine gives the same list.
 */
import { lstatSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

export function realFiles(limit: number, maxSize = 4 << 20): Array<{ path: string; size: number }> {
  const out: Array<{ path: string; size: number }> = [];
  const queue = ['/usr/share', '/usr/lib', resolve('node_modules')];
  while (queue.length > 0 && out.length < limit) {
    const dir = queue.shift()!;
    let names: string[];
    try {
      names = readdirSync(dir).sort();
    } catch {
      continue;
    }
    for (const n of names) {
      const p = join(dir, n);
      const st = lstatSync(p, { throwIfNoEntry: false });
      if (!st) continue;
      if (st.isDirectory()) queue.push(p);
      else if (st.isFile() && st.size > 0 && st.size < maxSize) out.push({ path: p, size: st.size });
    }
  }
  return out;
}
