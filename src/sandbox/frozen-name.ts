/**
 * The name of a fork's frozen copy of its parent's upper (see frozen.ts), apart from frozen.ts so
 * that the pure command-line builders (commands.ts) can tell such lowers from layers.
 */
import { basename } from 'node:path';

export const FROZEN_PREFIX = '.fork-';

export function isFrozenLower(dir: string): boolean {
  return basename(dir).startsWith(FROZEN_PREFIX);
}

/** How many of the top lowers (lowest first in `lowerDirs`) are the sandbox's own frozen writes. */
export function ownLowerCount(lowerDirs: readonly string[]): number {
  let n = 0;
  while (n < lowerDirs.length && isFrozenLower(lowerDirs[lowerDirs.length - 1 - n]!)) n++;
  return n;
}
