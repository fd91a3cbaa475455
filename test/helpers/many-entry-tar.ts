/**
 * A layer tar of many entries generated as a stream (ustar headers written by hand), nothing on
 * disk: `dirs` directories of `perDir` small files each, emitted in a scrambled order (a tar is
 * not sorted; the converter must sort), plus a few hardlinks, a whiteout and a replaced entry.
 */
function octal(buf: Buffer, off: number, len: number, v: number): void {
  buf.write(`${v.toString(8).padStart(len - 1, '0')}\0`, off, len, 'latin1');
}

function header(name: string, type: '0' | '1' | '5', size: number, linkname = ''): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, 'latin1');
  octal(h, 100, 8, type === '5' ? 0o755 : 0o644);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, 1_700_000_000);
  h.fill(0x20, 148, 156);
  h.write(type, 156, 1, 'latin1');
  h.write(linkname, 157, 100, 'latin1');
  h.write('ustar\u000000', 257, 8, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return h;
}

function entry(name: string, data: Buffer | null, type: '0' | '1' | '5' = '0', linkname = ''): Buffer {
  if (data === null || data.length === 0) return header(name, type, 0, linkname);
  const pad = (512 - (data.length % 512)) % 512;
  return Buffer.concat([header(name, type, data.length), data, Buffer.alloc(pad)]);
}

export interface ManyEntryTar {
  dirs: number;
  perDir: number;
  /** Give each `k`th file distinct content (the rest are empty); 0: all empty. */
  contentEvery?: number;
  /** false: no directory entries, every directory is implied by its files (default true). */
  dirEntries?: boolean;
}

/** The tar stream in chunks of ~1 MiB. Entry count: dirs * (perDir + 1) + extras (see below). */
export async function* manyEntryTar(o: ManyEntryTar): AsyncGenerator<Buffer> {
  let buf: Buffer[] = [];
  let len = 0;
  const push = (b: Buffer): Buffer[] | null => {
    buf.push(b);
    len += b.length;
    if (len < 1 << 20) return null;
    const out = buf;
    buf = [];
    len = 0;
    return out;
  };
  const flush = function* (bs: Buffer[] | null): Generator<Buffer> {
    if (bs !== null) yield Buffer.concat(bs);
  };
  // directories in scrambled order (a stride coprime with the count), then the files likewise
  const stride = (n: number): number => {
    let s = Math.floor(n * 0.618) | 1;
    const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
    while (gcd(s, n) !== 1) s += 2;
    return s;
  };
  const ds = stride(o.dirs);
  if (o.dirEntries !== false) for (let i = 0, d = 0; i < o.dirs; i++, d = (d + ds) % o.dirs) yield* flush(push(entry(`d${d}/`, null, '5')));
  const total = o.dirs * o.perDir;
  const fs = stride(total);
  for (let i = 0, k = 0; i < total; i++, k = (k + fs) % total) {
    const d = k % o.dirs;
    const f = Math.floor(k / o.dirs);
    const data = o.contentEvery !== undefined && o.contentEvery > 0 && k % o.contentEvery === 0 ? Buffer.from(`content ${k}\n`) : null;
    yield* flush(push(entry(`d${d}/f${f}`, data)));
  }
  // extras: hardlinks to earlier files (one of them later than a link's own name in sort order),
  // a file replaced later in the tar, a whiteout and an opaque directory
  yield* flush(push(entry('d0/link-a', null, '1', 'd1/f0')));
  yield* flush(push(entry('d1/link-b', null, '1', 'd1/f0')));
  yield* flush(push(entry('d0/f0', Buffer.from('replaced\n'))));
  yield* flush(push(entry('d2/.wh.gone', null)));
  yield* flush(push(entry('d3/.wh..wh..opq', null)));
  buf.push(Buffer.alloc(1024));
  yield Buffer.concat(buf);
}
