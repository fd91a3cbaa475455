/**
 * Paths met in manifest order (byte-wise) whose subtree a later path may still fall in. After a
 * path X, everything up to the first path that neither starts with `X/` nor sorts before `X/` is
 * X's subtree or a name extending X with a byte below `/`. Those ranges nest, so a stack holds
 * the open ones, each inside the one below it: a later path closes those whose range it passed.
 * The manifest reader keeps the non-directories (nothing may be below them); stacking keeps
 * what hides the layers below (image/implicit-parents.ts).
 */
export class OpenSubtrees<T extends { raw: Buffer }> {
  private readonly stack: T[] = [];

  /** Closes the ranges `raw`, a later path than any given before, has passed. */
  advance(raw: Buffer): void {
    while (this.stack.length > 0) {
      const top = this.stack[this.stack.length - 1]!;
      if (isBelow(raw, top.raw) || sortsBeforeSlash(raw, top.raw)) return;
      this.stack.pop();
    }
  }

  /** Opens the range of a path given to `advance` last. */
  push(x: T): void {
    this.stack.push(x);
  }

  /** The open path `raw` (given to `advance` last) is strictly below, if any. */
  ancestorOf(raw: Buffer): T | undefined {
    for (const o of this.stack) if (isBelow(raw, o.raw)) return o;
    return undefined;
  }
}

/** p is strictly inside a (p starts with `a/`). */
function isBelow(p: Buffer, a: Buffer): boolean {
  return p.length > a.length + 1 && p[a.length] === 0x2f && p.compare(a, 0, a.length, 0, a.length) === 0;
}

/** p < a + '/' byte-wise (given p > a), without building a + '/' (a buffer per entry showed in profiles). */
function sortsBeforeSlash(p: Buffer, a: Buffer): boolean {
  const n = Math.min(p.length, a.length);
  const c = p.compare(a, 0, n, 0, n);
  if (c !== 0) return c < 0;
  // p starts with a's first n bytes: a shorter p sorts first; else the byte after a decides
  return p.length <= a.length || p[a.length]! < 0x2f;
}
