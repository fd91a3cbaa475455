/**
 * JSON answers that hold large strings (a command's output, a file's text) go out as a stream of
 * pieces, written at the client's pace: JSON.stringify of the whole would make one more string up
 * to six times the output's size (a NUL is `\u0000`), and then a buffer of it, and a client that
 * does not read would keep both. Small answers take fastify's usual path.
 */
import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';

/** Characters of a string encoded at a time. */
const PIECE = 1 << 16;
/** Answers whose strings add up to less than this are serialized whole. */
const STREAM_FROM = 256 << 10;

/** The characters of the strings in `v` (plain objects and arrays, a few levels deep). */
export function stringChars(v: unknown, depth = 0): number {
  if (typeof v === 'string') return v.length;
  if (depth > 8 || v === null || typeof v !== 'object') return 0;
  let n = 0;
  for (const x of Array.isArray(v) ? v : Object.values(v)) n += stringChars(x, depth + 1);
  return n;
}

function isPlainObject(v: object): v is Record<string, unknown> {
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

function* stringPieces(s: string): Generator<string> {
  if (s.length <= PIECE) {
    yield JSON.stringify(s);
    return;
  }
  yield '"';
  for (let i = 0; i < s.length; ) {
    let j = Math.min(s.length, i + PIECE);
    // a surrogate pair stays in one piece: JSON.stringify escapes a lone half as \udXXX
    const last = s.charCodeAt(j - 1);
    if (j < s.length && last >= 0xd800 && last <= 0xdbff) j--;
    yield JSON.stringify(s.slice(i, j)).slice(1, -1);
    i = j;
  }
  yield '"';
}

/** The JSON text of `v` in pieces, the same text JSON.stringify(v) makes (plain objects, arrays and scalars). */
export function* jsonPieces(v: unknown): Generator<string> {
  if (typeof v === 'string') {
    yield* stringPieces(v);
    return;
  }
  if (Array.isArray(v)) {
    yield '[';
    for (let i = 0; i < v.length; i++) {
      if (i > 0) yield ',';
      const x: unknown = v[i];
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol') yield 'null';
      else yield* jsonPieces(x);
    }
    yield ']';
    return;
  }
  if (v !== null && typeof v === 'object' && isPlainObject(v)) {
    yield '{';
    let first = true;
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue;
      yield `${first ? '' : ','}${JSON.stringify(k)}:`;
      first = false;
      yield* jsonPieces(x);
    }
    yield '}';
    return;
  }
  yield JSON.stringify(v) ?? 'null';
}

/** `value` as the answer: whole when small, else streamed in pieces with backpressure. */
export function jsonReply(reply: FastifyReply, value: unknown): unknown {
  if (stringChars(value) < STREAM_FROM) return value;
  return reply.type('application/json; charset=utf-8').send(Readable.from(jsonPieces(value), { objectMode: false }));
}
