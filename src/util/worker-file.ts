/**
 * Worker threads run real files: CommonJS `.cjs` modules next to the code that starts them, so
 * they need no TypeScript loader. The file is found next to the calling module (the sources under
 * tsx or vitest, and dist/lib, where build:lib copies it) or in dist/workers/ (the bundle,
 * dist/cli.mjs and its chunks in dist/cli-chunks/, where bin/build-cli.mjs copies it).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const found = new Map<string, string>();

/** The path of worker file `name` (e.g. `decode-worker.cjs`) for the module at `here` (its import.meta.url). */
export function workerFile(here: string, name: string): string {
  const key = `${here}\0${name}`;
  const hit = found.get(key);
  if (hit !== undefined) return hit;
  for (const rel of [`./${name}`, `./workers/${name}`, `../workers/${name}`]) {
    const p = fileURLToPath(new URL(rel, here));
    if (existsSync(p)) {
      found.set(key, p);
      return p;
    }
  }
  throw new Error(`worker file ${name} not found next to ${here} or in a workers/ folder beside it (rebuild with npm run build)`);
}
