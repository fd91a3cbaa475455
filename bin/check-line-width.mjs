#!/usr/bin/env node
/**
 * Fails (exit 1, one line per offender) when a source line is longer than biome's line width.
 * Biome's formatter wraps code to that width but not string literals, so a long message, test
 * name or script line would pass `biome check`: split such strings with `+` or template pieces.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(fileURLToPath(import.meta.url), '..', '..');
const width = JSON.parse(readFileSync(join(root, 'biome.json'), 'utf8')).formatter?.lineWidth ?? 80;
const DIRS = ['src', 'bench', 'test', 'examples', 'bin'];
const EXT = /\.(ts|mts|cts|mjs|cjs|js)$/;

let bad = 0;
for (const dir of DIRS) {
  let files;
  try {
    files = readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' });
  } catch {
    continue; // a folder this checkout does not have
  }
  for (const f of files) {
    if (!EXT.test(f) || f.split('/').includes('node_modules')) continue;
    const path = join(root, dir, f);
    let text;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      continue; // a directory named like a file
    }
    text.split('\n').forEach((line, i) => {
      if (line.length > width) {
        bad++;
        console.error(`${relative(root, path)}:${i + 1}: ${line.length} characters (at most ${width}; split long strings with +)`);
      }
    });
  }
}
if (bad > 0) {
  console.error(`${bad} line(s) over ${width} characters`);
  process.exit(1);
}
