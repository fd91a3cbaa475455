#!/usr/bin/env node
/**
 * Fails (exit 1, one line per offender) when a source line is longer than biome's line width, or
 * a README line longer than 100 columns.
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
// The READMEs are read in terminals: prose, tables and code blocks fit 100 columns.
const DOCS = ['README.md', 'clients/python/README.md'];
const DOC_WIDTH = 100;
for (const doc of DOCS) {
  readFileSync(join(root, doc), 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if (line.length > DOC_WIDTH) {
        bad++;
        console.error(`${doc}:${i + 1}: ${line.length} characters (a README line is at most ${DOC_WIDTH})`);
      }
    });
}
if (bad > 0) {
  console.error(`${bad} line(s) over their width`);
  process.exit(1);
}
