/**
 * File names are bytes on Linux, manifests are JSON text. A manifest path is the UTF-8 name with
 * every byte that is not part of valid UTF-8, and the backslash itself, written as `\xHH`.
 * The encoding is reversible and canonical, and leaves ordinary names readable.
 */
import { UnsafePathError } from '../errors.js';

const decoder = new TextDecoder('utf-8', { fatal: true });

export function encodePath(bytes: Buffer): string {
  if (!bytes.includes(0x5c)) {
    try {
      return decoder.decode(bytes);
    } catch {
      // falls through to the byte-wise encoding
    }
  }
  let out = '';
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    if (b === 0x5c) {
      out += '\\x5c';
      i += 1;
      continue;
    }
    const len = utf8SeqLen(bytes, i);
    if (len === 0) {
      out += `\\x${b.toString(16).padStart(2, '0')}`;
      i += 1;
    } else {
      out += bytes.subarray(i, i + len).toString('utf8');
      i += len;
    }
  }
  return out;
}

export function decodePath(s: string): Buffer {
  if (!s.includes('\\')) return Buffer.from(s, 'utf8');
  const parts: Buffer[] = [];
  let last = 0;
  const re = /\\x([0-9a-f]{2})/g;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    parts.push(Buffer.from(s.slice(last, m.index), 'utf8'), Buffer.from([parseInt(m[1]!, 16)]));
    last = m.index + 4;
  }
  const rest = s.slice(last);
  if (rest.includes('\\')) throw new UnsafePathError(s, 'stray backslash in an encoded path');
  parts.push(Buffer.from(rest, 'utf8'));
  return Buffer.concat(parts);
}

/** Length of the valid UTF-8 sequence at i, or 0 if the byte there does not start one. */
function utf8SeqLen(b: Buffer, i: number): number {
  const c = b[i]!;
  if (c < 0x80) return 1;
  let len: number;
  let min: number;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    min = 0x10000;
  } else return 0;
  if (i + len > b.length) return 0;
  let cp = c & (0xff >> (len + 1));
  for (let k = 1; k < len; k++) {
    const cc = b[i + k]!;
    if ((cc & 0xc0) !== 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/**
 * Checks that a manifest path names something strictly inside the layer root: relative,
 * no empty, `.` or `..` component, no NUL. Returns the decoded components.
 */
export function checkRelativePath(p: string): Buffer[] {
  if (p.length === 0) throw new UnsafePathError(p, 'empty path');
  if (p.startsWith('/')) throw new UnsafePathError(p, 'absolute path');
  const raw = decodePath(p);
  if (raw.includes(0)) throw new UnsafePathError(p, 'NUL byte in path');
  const comps: Buffer[] = [];
  let start = 0;
  for (let i = 0; i <= raw.length; i++) {
    if (i === raw.length || raw[i] === 0x2f) {
      const c = raw.subarray(start, i);
      if (c.length === 0) throw new UnsafePathError(p, 'empty path component');
      if (c.length === 1 && c[0] === 0x2e) throw new UnsafePathError(p, '`.` component');
      if (c.length === 2 && c[0] === 0x2e && c[1] === 0x2e) throw new UnsafePathError(p, '`..` component');
      comps.push(c);
      start = i + 1;
    }
  }
  return comps;
}

/** Byte-wise order of decoded paths: the canonical order of manifest entries (parents first). */
export function comparePaths(a: string, b: string): number {
  return Buffer.compare(decodePath(a), decodePath(b));
}
