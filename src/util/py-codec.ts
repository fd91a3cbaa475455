/**
 * Python's byte decoding (`bytes.decode(encoding, errors)`) for the codecs agents use: UTF-8, ASCII
 * and Latin-1 with Python's error handlers and messages, so that text a SWE-ReX client gets reads as
 * what SWE-ReX itself would return. An undecodable UTF-8 sequence is the "maximal subpart" Python
 * reports (a lead byte and the continuation bytes that fit it); `backslashreplace` writes each of its
 * bytes as `\xNN`, `replace` the whole of it as one U+FFFD, `surrogateescape` each byte as U+DC80+.
 */

/** The Python exception a decode raises: its builtin class name and `str(exc)`. */
export class PyCodecError extends Error {
  constructor(
    readonly pyClass: 'UnicodeDecodeError' | 'LookupError' | 'TypeError',
    message: string,
  ) {
    super(message);
  }
}

interface BadRun {
  /** Bytes in the undecodable run (Python's error range). */
  length: number;
  reason: 'invalid start byte' | 'invalid continuation byte' | 'unexpected end of data';
}

const isCont = (b: number | undefined): boolean => b !== undefined && (b & 0xc0) === 0x80;

/** The byte length of the valid UTF-8 sequence at `i`, or the undecodable run there. */
function sequenceAt(b: Uint8Array, i: number): number | BadRun {
  const lead = b[i]!;
  if (lead < 0x80) return 1;
  let need: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) need = 1;
  else if (lead >= 0xe0 && lead <= 0xef) {
    need = 2;
    if (lead === 0xe0) lo = 0xa0;
    else if (lead === 0xed) hi = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    need = 3;
    if (lead === 0xf0) lo = 0x90;
    else if (lead === 0xf4) hi = 0x8f;
  } else return { length: 1, reason: 'invalid start byte' };
  for (let k = 1; k <= need; k++) {
    const c = b[i + k];
    if (c === undefined) return { length: k, reason: 'unexpected end of data' };
    const ok = k === 1 ? c >= lo && c <= hi : isCont(c);
    if (!ok) return { length: k, reason: 'invalid continuation byte' };
  }
  return need + 1;
}

/** A UTF-16 surrogate that UTF-8 encodes as ED A0-BF 80-BF (what `surrogatepass` lets through). */
function encodedSurrogateAt(b: Uint8Array, i: number): number | undefined {
  const [x, y, z] = [b[i], b[i + 1], b[i + 2]];
  if (x !== 0xed || y === undefined || z === undefined || y < 0xa0 || y > 0xbf || !isCont(z)) return undefined;
  return ((x & 0x0f) << 12) | ((y & 0x3f) << 6) | (z & 0x3f);
}

function hex2(n: number): string {
  return n.toString(16).padStart(2, '0');
}

function decodeErrorMessage(codec: string, b: Uint8Array, start: number, length: number, reason: string): string {
  return length === 1
    ? `'${codec}' codec can't decode byte 0x${hex2(b[start]!)} in position ${start}: ${reason}`
    : `'${codec}' codec can't decode bytes in position ${start}-${start + length - 1}: ${reason}`;
}

/** What the error handler `errors` puts for the undecodable bytes b[start, start+length), as Python's. */
function handled(codec: string, errors: string, b: Uint8Array, start: number, length: number, reason: string): string {
  switch (errors) {
    case 'strict':
    case 'surrogatepass':
      throw new PyCodecError('UnicodeDecodeError', decodeErrorMessage(codec, b, start, length, reason));
    case 'replace':
      return '\ufffd';
    case 'ignore':
      return '';
    case 'backslashreplace': {
      let s = '';
      for (let k = start; k < start + length; k++) s += `\\x${hex2(b[k]!)}`;
      return s;
    }
    case 'surrogateescape': {
      let s = '';
      for (let k = start; k < start + length; k++) s += String.fromCharCode(0xdc00 + b[k]!);
      return s;
    }
    case 'namereplace':
    case 'xmlcharrefreplace':
      throw new PyCodecError('TypeError', "don't know how to handle UnicodeDecodeError in error callback");
    default:
      throw new PyCodecError('LookupError', `unknown error handler name '${errors}'`);
  }
}

/**
 * `bytes.decode('utf-8', errors)`. Not `final`: a sequence cut off at the end is left undecoded
 * (as an incremental decoder keeps it for the next chunk); `consumed` says how far it got.
 */
export function decodeUtf8(b: Uint8Array, errors = 'strict', final = true): { text: string; consumed: number } {
  const buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  let out = '';
  let runStart = 0;
  let i = 0;
  while (i < b.length) {
    if (b[i]! < 0x80) {
      i++;
      continue;
    }
    const seq = sequenceAt(b, i);
    if (typeof seq === 'number') {
      i += seq;
      continue;
    }
    if (seq.reason === 'unexpected end of data' && !final) break;
    out += buf.toString('utf8', runStart, i);
    const surrogate = errors === 'surrogatepass' ? encodedSurrogateAt(b, i) : undefined;
    if (surrogate !== undefined) {
      out += String.fromCharCode(surrogate);
      i += 3;
    } else {
      out += handled('utf-8', errors, b, i, seq.length, seq.reason);
      i += seq.length;
    }
    runStart = i;
  }
  out += buf.toString('utf8', runStart, i);
  return { text: out, consumed: i };
}

/** `bytes.decode('ascii', errors)`: every byte from 0x80 up is an error of its own. */
export function decodeAscii(b: Uint8Array, errors = 'strict'): string {
  let out = '';
  for (let i = 0; i < b.length; i++) {
    const c = b[i]!;
    out += c < 0x80 ? String.fromCharCode(c) : handled('ascii', errors === 'surrogatepass' ? 'strict' : errors, b, i, 1, 'ordinal not in range(128)');
  }
  return out;
}

/** UTF-8 decoded chunk by chunk, as Python's incremental decoder (pexpect's) does it. */
export class Utf8StreamDecoder {
  private rest: Buffer = Buffer.alloc(0);
  constructor(private readonly errors = 'backslashreplace') {}

  push(chunk: Buffer): string {
    const b = this.rest.length === 0 ? chunk : Buffer.concat([this.rest, chunk]);
    const { text, consumed } = decodeUtf8(b, this.errors, false);
    this.rest = b.subarray(consumed);
    return text;
  }

  /** What a cut-off sequence at the end decodes to once no more bytes come. */
  end(): string {
    const { text } = decodeUtf8(this.rest, this.errors, true);
    this.rest = Buffer.alloc(0);
    return text;
  }
}

/** `bytes.decode(errors="backslashreplace")`, as SWE-ReX decodes what a command printed. */
export function backslashReplace(b: Uint8Array): string {
  return decodeUtf8(b, 'backslashreplace').text;
}
