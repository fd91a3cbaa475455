/**
 * Python's UTF-8 and ASCII decoding with its error handlers. Every expected value below was computed
 * by CPython 3.11 (`bytes.fromhex(h).decode('utf-8', errors)`, and `str(exc)` for strict), so the
 * maximal-subpart rules for cut-off and invalid sequences are Python's own, not a reading of them.
 */
import { describe, expect, it } from 'vitest';
import { decodeAscii, decodeUtf8, PyCodecError, Utf8StreamDecoder } from './py-codec.js';

// hex, backslashreplace, replace, ignore, surrogateescape, str() of the strict error (null: decodes)
const PYTHON: Array<[string, string, string, string, string, string | null]> = [
  ['61ff62', 'a\\xffb', 'a\ufffdb', 'ab', 'a\udcffb', "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"],
  ['e282', '\\xe2\\x82', '\ufffd', '', '\udce2\udc82', "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data"],
  ['e28241', '\\xe2\\x82A', '\ufffdA', 'A', '\udce2\udc82A', "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte"],
  ['e282ac', '\u20ac', '\u20ac', '\u20ac', '\u20ac', null],
  ['f09f98', '\\xf0\\x9f\\x98', '\ufffd', '', '\udcf0\udc9f\udc98', "'utf-8' codec can't decode bytes in position 0-2: unexpected end of data"],
  ['f09f9878', '\\xf0\\x9f\\x98x', '\ufffdx', 'x', '\udcf0\udc9f\udc98x', "'utf-8' codec can't decode bytes in position 0-2: invalid continuation byte"],
  ['c0af', '\\xc0\\xaf', '\ufffd\ufffd', '', '\udcc0\udcaf', "'utf-8' codec can't decode byte 0xc0 in position 0: invalid start byte"],
  [
    'eda080',
    '\\xed\\xa0\\x80',
    '\ufffd\ufffd\ufffd',
    '',
    '\udced\udca0\udc80',
    "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte",
  ],
  [
    'f4908080',
    '\\xf4\\x90\\x80\\x80',
    '\ufffd\ufffd\ufffd\ufffd',
    '',
    '\udcf4\udc90\udc80\udc80',
    "'utf-8' codec can't decode byte 0xf4 in position 0: invalid continuation byte",
  ],
  [
    'e080af',
    '\\xe0\\x80\\xaf',
    '\ufffd\ufffd\ufffd',
    '',
    '\udce0\udc80\udcaf',
    "'utf-8' codec can't decode byte 0xe0 in position 0: invalid continuation byte",
  ],
  ['f888', '\\xf8\\x88', '\ufffd\ufffd', '', '\udcf8\udc88', "'utf-8' codec can't decode byte 0xf8 in position 0: invalid start byte"],
  ['e2e282ac', '\\xe2\u20ac', '\ufffd\u20ac', '\u20ac', '\udce2\u20ac', "'utf-8' codec can't decode byte 0xe2 in position 0: invalid continuation byte"],
  ['c3', '\\xc3', '\ufffd', '', '\udcc3', "'utf-8' codec can't decode byte 0xc3 in position 0: unexpected end of data"],
  ['6f6bc3a9ff', 'ok\u00e9\\xff', 'ok\u00e9\ufffd', 'ok\u00e9', 'ok\u00e9\udcff', "'utf-8' codec can't decode byte 0xff in position 4: invalid start byte"],
  ['f090', '\\xf0\\x90', '\ufffd', '', '\udcf0\udc90', "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data"],
  ['ed9f', '\\xed\\x9f', '\ufffd', '', '\udced\udc9f', "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data"],
];

describe('decodeUtf8', () => {
  it.each(PYTHON)('decodes %s as CPython does with each error handler', (hex, backslash, replace, ignore, escaped, strict) => {
    const b = Buffer.from(hex, 'hex');
    expect(decodeUtf8(b, 'backslashreplace').text).toBe(backslash);
    expect(decodeUtf8(b, 'replace').text).toBe(replace);
    expect(decodeUtf8(b, 'ignore').text).toBe(ignore);
    expect(decodeUtf8(b, 'surrogateescape').text).toBe(escaped);
    if (strict === null) expect(decodeUtf8(b).text).toBe(Buffer.from(hex, 'hex').toString('utf8'));
    else expect(() => decodeUtf8(b)).toThrow(new PyCodecError('UnicodeDecodeError', strict));
  });

  it('lets an encoded surrogate through with surrogatepass, and refuses other bad bytes as strict does', () => {
    expect(decodeUtf8(Buffer.from('78eda08079', 'hex'), 'surrogatepass').text).toBe('x\ud800y');
    expect(() => decodeUtf8(Buffer.from('61ff62', 'hex'), 'surrogatepass')).toThrow("can't decode byte 0xff in position 1: invalid start byte");
  });

  it('names an unknown error handler only when a byte needs it, as Python does', () => {
    expect(decodeUtf8(Buffer.from('abc'), 'foo').text).toBe('abc');
    expect(() => decodeUtf8(Buffer.from('61ff', 'hex'), 'foo')).toThrow(new PyCodecError('LookupError', "unknown error handler name 'foo'"));
    expect(() => decodeUtf8(Buffer.from('61ff', 'hex'), 'namereplace')).toThrow(
      new PyCodecError('TypeError', "don't know how to handle UnicodeDecodeError in error callback"),
    );
  });

  it('decodes a stream split anywhere as the whole, a cut-off sequence at its end included', () => {
    const bytes = Buffer.from('61e282ac62f09f988063ff64e282', 'hex');
    const whole = decodeUtf8(bytes, 'backslashreplace').text;
    expect(whole).toBe('a\u20acb\ud83d\ude00c\\xffd\\xe2\\x82');
    for (let cut = 0; cut <= bytes.length; cut++) {
      const d = new Utf8StreamDecoder();
      expect(d.push(bytes.subarray(0, cut)) + d.push(bytes.subarray(cut)) + d.end()).toBe(whole);
    }
  });
});

describe('decodeAscii', () => {
  it("refuses or replaces each byte from 0x80 up, with Python's message", () => {
    const b = Buffer.from('61ff62', 'hex');
    expect(() => decodeAscii(b)).toThrow(
      new PyCodecError('UnicodeDecodeError', "'ascii' codec can't decode byte 0xff in position 1: ordinal not in range(128)"),
    );
    expect(decodeAscii(b, 'backslashreplace')).toBe('a\\xffb');
    expect(decodeAscii(b, 'replace')).toBe('a\ufffdb');
  });
});
