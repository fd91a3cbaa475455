/**
 * A streaming reader of image layer tars (ustar, GNU and PAX), written here rather than taken
 * from tar-stream because a layer needs what that library drops: names and xattr values as raw
 * bytes (names need not be UTF-8; `security.capability` is binary), PAX `uid`/`gid`/`mtime` with
 * nanoseconds, and every byte of the stream counted and hashed (the diff id covers the padding
 * after the end-of-archive blocks too). Entry bodies are handed out as chunks and never
 * gathered, so memory stays at one chunk whatever the file sizes.
 */
import { createHash, type Hash } from 'node:crypto';
import { InvalidInputError } from '../errors.js';

export type TarType = 'file' | 'hardlink' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';

export interface TarHeader {
  /** Raw name bytes (PAX `path` or GNU long name when present). */
  name: Buffer;
  /** Raw link target bytes (symlinks and hardlinks). */
  linkname: Buffer;
  type: TarType;
  mode: number;
  uid: number;
  gid: number;
  /** Nanoseconds since the epoch. */
  mtimeNs: bigint;
  size: number;
  devmajor: number;
  devminor: number;
  /** name -> raw value, from PAX `SCHILY.xattr.*` records. */
  xattrs: Map<string, Buffer>;
}

const BLOCK = 512;

/** Pulls bytes out of an async iterable of chunks, hashing and counting everything it takes. */
class ByteSource {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  readonly hash: Hash = createHash('sha256');
  total = 0;
  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async more(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done === true) {
      this.done = true;
      return false;
    }
    const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
    this.hash.update(chunk);
    this.total += chunk.length;
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    return true;
  }

  /** Exactly n bytes, or fewer at the end of the stream. */
  async take(n: number): Promise<Buffer> {
    while (this.buf.length < n) if (!(await this.more())) break;
    const out = this.buf.subarray(0, Math.min(n, this.buf.length));
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  /** Up to n bytes (at least one unless the stream ended): for streaming bodies. */
  async some(n: number): Promise<Buffer> {
    if (this.buf.length === 0 && !(await this.more())) return Buffer.alloc(0);
    const out = this.buf.subarray(0, Math.min(n, this.buf.length));
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  /** Reads to the end of the stream (bytes after the end-of-archive still belong to the diff id). */
  async drain(): Promise<void> {
    this.buf = Buffer.alloc(0);
    while (await this.more()) this.buf = Buffer.alloc(0);
  }
}

function cstr(b: Buffer, off: number, len: number): Buffer {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return z < 0 ? s : s.subarray(0, z);
}

/** Octal, or GNU base-256 (high bit of the first byte set) for values that do not fit. */
function num(b: Buffer, off: number, len: number, what: string): number {
  const s = b.subarray(off, off + len);
  if ((s[0]! & 0x80) !== 0) {
    let v = BigInt(s[0]! & 0x7f);
    for (let i = 1; i < s.length; i++) v = (v << 8n) | BigInt(s[i]!);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new InvalidInputError(`layer tar: ${what} out of range`);
    return Number(v);
  }
  const t = s.toString('latin1').replace(/\0.*$/s, '').trim();
  if (t === '') return 0;
  if (!/^[0-7]+$/.test(t))
    throw new InvalidInputError(`layer tar: ${what} is not an octal number (${JSON.stringify(t)})`, 'the layer is corrupt or not a tar archive');
  return Number.parseInt(t, 8);
}

function checksumOk(h: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
  return sum === num(h, 148, 8, 'checksum');
}

/** PAX records: `LEN key=value\n`, values raw bytes. */
function parsePax(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0) break;
    const len = Number.parseInt(data.subarray(off, sp).toString('latin1'), 10);
    if (!Number.isSafeInteger(len) || len <= sp - off || off + len > data.length)
      throw new InvalidInputError('layer tar: malformed PAX record', 'the layer is corrupt');
    const rec = data.subarray(sp + 1, off + len - 1); // without the trailing newline
    const eq = rec.indexOf(0x3d);
    if (eq > 0) out.set(rec.subarray(0, eq).toString('utf8'), rec.subarray(eq + 1));
    off += len;
  }
  return out;
}

/** PAX `mtime`: decimal seconds with an optional fraction, possibly negative. */
function paxTime(v: Buffer): bigint {
  const s = v.toString('latin1');
  const m = /^(-?)(\d+)(?:\.(\d*))?$/.exec(s);
  if (m === null) throw new InvalidInputError(`layer tar: bad PAX mtime ${JSON.stringify(s)}`);
  const frac = (m[3] ?? '').slice(0, 9).padEnd(9, '0');
  const ns = BigInt(m[2]!) * 1_000_000_000n + BigInt(frac);
  return m[1] === '-' ? -ns : ns;
}

const TYPES: Record<string, TarType> = {
  '0': 'file',
  '\0': 'file',
  '7': 'file',
  '1': 'hardlink',
  '2': 'symlink',
  '3': 'char',
  '4': 'block',
  '5': 'dir',
  '6': 'fifo',
};

/** Largest metadata body (PAX or GNU long name) taken into memory. */
const MAX_META = 1 << 20;

export interface TarEntry {
  header: TarHeader;
  /** The body in chunks; must be consumed (or skipped by not calling) before the next entry. */
  body(): AsyncGenerator<Buffer>;
}

/**
 * Entries of a tar stream. `onEnd` receives the sha256 and byte count of the whole stream
 * once it is read to its end.
 */
export async function* readTar(chunks: AsyncIterable<Buffer>, onEnd: (r: { digest: string; bytes: number }) => void): AsyncGenerator<TarEntry> {
  const src = new ByteSource(chunks[Symbol.asyncIterator]());
  let globalPax = new Map<string, Buffer>();
  let pax: Map<string, Buffer> | null = null;
  let longName: Buffer | null = null;
  let longLink: Buffer | null = null;
  for (;;) {
    const h = await src.take(BLOCK);
    if (h.length === 0) break; // a stream without end-of-archive blocks: tolerated, as GNU tar does
    if (h.length < BLOCK) throw new InvalidInputError('layer tar: truncated header', 'the layer blob is cut short; fetch it again');
    if (h.every((b) => b === 0)) break;
    if (!checksumOk(h)) throw new InvalidInputError('layer tar: header checksum mismatch', 'the layer is corrupt or not a tar archive');
    const flag = String.fromCharCode(h[156]!);
    const size = num(h, 124, 12, 'size');
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
      if (size > MAX_META) throw new InvalidInputError(`layer tar: a ${flag} header of ${size} bytes`, 'the layer is hostile or corrupt');
      const body = await src.take(padded);
      if (body.length < padded) throw new InvalidInputError('layer tar: truncated', 'the layer blob is cut short; fetch it again');
      const data = body.subarray(0, size);
      if (flag === 'x') pax = parsePax(data);
      else if (flag === 'g') globalPax = new Map([...globalPax, ...parsePax(data)]);
      else if (flag === 'L') longName = cstr(data, 0, data.length);
      else longLink = cstr(data, 0, data.length);
      continue;
    }
    const type = TYPES[flag];
    const rec = new Map([...globalPax, ...(pax ?? [])]);
    pax = null;
    const hadLongName = longName !== null;
    let name = longName ?? cstr(h, 0, 100);
    let linkname = longLink ?? cstr(h, 157, 100);
    longName = null;
    longLink = null;
    const magic = h.subarray(257, 263).toString('latin1');
    if (magic === 'ustar\0' && !hadLongName && h[345] !== 0 && !rec.has('path')) {
      name = Buffer.concat([cstr(h, 345, 155), Buffer.from('/'), name]);
    }
    if (rec.has('path')) name = rec.get('path')!;
    if (rec.has('linkpath')) linkname = rec.get('linkpath')!;
    if (type === undefined) {
      throw new InvalidInputError(
        `layer tar: ${JSON.stringify(name.toString('utf8'))} has tar type ${JSON.stringify(flag)}, which a layer cannot hold`,
        'only files, dirs, links, devices and fifos are supported',
      );
    }
    const realSize = rec.has('size') ? Number(rec.get('size')!.toString('latin1')) : size;
    const xattrs = new Map<string, Buffer>();
    for (const [k, v] of rec) if (k.startsWith('SCHILY.xattr.')) xattrs.set(k.slice('SCHILY.xattr.'.length), v);
    const header: TarHeader = {
      name,
      linkname,
      type,
      mode: num(h, 100, 8, 'mode') & 0o7777,
      uid: rec.has('uid') ? Number(rec.get('uid')!.toString('latin1')) : num(h, 108, 8, 'uid'),
      gid: rec.has('gid') ? Number(rec.get('gid')!.toString('latin1')) : num(h, 116, 8, 'gid'),
      mtimeNs: rec.has('mtime') ? paxTime(rec.get('mtime')!) : BigInt(num(h, 136, 12, 'mtime')) * 1_000_000_000n,
      size: type === 'file' ? realSize : 0,
      devmajor: num(h, 329, 8, 'devmajor'),
      devminor: num(h, 337, 8, 'devminor'),
      xattrs,
    };
    for (const [what, v] of [
      ['uid', header.uid],
      ['gid', header.gid],
      ['size', realSize],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 0) throw new InvalidInputError(`layer tar: bad ${what} for ${JSON.stringify(name.toString('utf8'))}`);
    }
    // hardlinks and others may carry a size field but have no body in any tar we accept
    const bodyBytes = type === 'file' ? realSize : flag === '1' ? 0 : realSize;
    let consumed = false;
    const body = async function* (): AsyncGenerator<Buffer> {
      consumed = true;
      let left = bodyBytes;
      while (left > 0) {
        const c = await src.some(Math.min(left, 1 << 20));
        if (c.length === 0)
          throw new InvalidInputError(`layer tar: ${JSON.stringify(name.toString('utf8'))} is cut short`, 'the layer blob is truncated; fetch it again');
        left -= c.length;
        yield c;
      }
    };
    yield { header, body };
    if (!consumed) for await (const _ of body()) void _;
    const pad = Math.ceil(bodyBytes / BLOCK) * BLOCK - bodyBytes;
    if (pad > 0 && (await src.take(pad)).length < pad)
      throw new InvalidInputError('layer tar: truncated padding', 'the layer blob is truncated; fetch it again');
  }
  await src.drain();
  onEnd({ digest: `sha256:${src.hash.digest('hex')}`, bytes: src.total });
}
