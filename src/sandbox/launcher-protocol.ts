/**
 * The wire format of `sandbox-launch serve` (native/sandbox-launch-serve.c, which documents it):
 * requests as NUL-terminated fields behind a field count, events as lines (an `O` line followed
 * by its raw bytes). Both sides bound a record by the kernel's limit for one exec (arg-max.ts):
 * a request the server would refuse is refused here first, as a typed error; an event line this
 * side does not understand is skipped, never taken for another or left to stall the stream.
 */
import { InvalidInputError } from '../errors.js';
import { argMax } from './arg-max.js';

/** Request ids: what the server answers for (they go into its event lines). */
export const ID_RE = /^[A-Za-z0-9._-]{1,64}$/;
/** Largest I payload the server takes; its input pieces are smaller. */
export const INPUT_MAX = 1 << 20;
/** Bytes of a command's input one I record carries. */
export const INPUT_PIECE = 64 << 10;
/**
 * A command's input sent and not yet acknowledged (W): what the server may hold for it. The server
 * holds at most INPUT_MAX; past that it closes the command's stdin.
 */
export const INPUT_WINDOW = 256 << 10;

/** A record's bounds, as the server computes them from the same ARG_MAX (see the serve source). */
export function recordLimits(max = argMax()): { bytes: number; fields: number } {
  return { bytes: max + (1 << 20), fields: Math.floor(max / 4) + 4096 };
}

/** One request record: `fields` (verb, id, arguments). Throws a typed error for what the server would refuse. */
export function encodeRequest(fields: string[], limits = recordLimits()): Buffer {
  const [verb = '', id = ''] = fields;
  if (!ID_RE.test(id)) throw new InvalidInputError(`launcher request id ${JSON.stringify(id)} is not 1 to 64 of [A-Za-z0-9._-]`);
  let bytes = 0;
  for (const f of fields) {
    if (f.includes('\0'))
      throw new InvalidInputError(
        'a sandbox argument contains a NUL byte',
        'paths, hostnames, workdirs, commands and environment variables cannot contain NUL',
      );
    bytes += Buffer.byteLength(f) + 1;
  }
  if (fields.length > limits.fields || bytes > limits.bytes)
    throw new InvalidInputError(
      `a ${verb} request of ${fields.length} fields and ${bytes} bytes is past what the launcher takes (${limits.fields} fields, ${limits.bytes} bytes)`,
      'argv and the environment of one command are bounded by the kernel (ARG_MAX): pass large data in a file or on stdin',
    );
  return Buffer.from(`${fields.length}\0${fields.join('\0')}\0`);
}

/** The I records for `data` of command `id`: pieces of at most INPUT_PIECE bytes. */
export function encodeInput(id: string, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`3\0I\0${id}\0${data.length}\0`), data]);
}

export type LauncherEvent =
  | { kind: 'R'; id: string; holderPid: number; initPid: number }
  | { kind: 'E'; id: string; status: number; message: string }
  | { kind: 'X'; id: string; status: number }
  | { kind: 'P'; id: string; pid: number }
  | { kind: 'O'; id: string; stream: 1 | 2 | 3; data: Buffer }
  | { kind: 'W'; id: string; bytes: number }
  | { kind: 'D'; id: string; code: number; signal: number }
  | { kind: 'Z'; id: string };

/** An O frame's bytes are at most this (the server relays 64 KiB reads); a longer one is no frame. */
const FRAME_MAX = 1 << 20;
/** Event lines are short (the server writes at most 4 KiB); a longer run without a newline is garbage. */
const LINE_MAX = 64 << 10;

const ID = '([A-Za-z0-9._-]{1,64})';
const INT = '(-?\\d{1,10})';
const LINES: Array<[RegExp, (m: RegExpExecArray, line: string) => LauncherEvent]> = [
  [new RegExp(`^R ${ID} ${INT} ${INT}$`), (m) => ({ kind: 'R', id: m[1]!, holderPid: Number(m[2]), initPid: Number(m[3]) })],
  [new RegExp(`^E ${ID} ${INT}(?: |$)`), (m, line) => ({ kind: 'E', id: m[1]!, status: Number(m[2]), message: utf8(line.slice(m[0].length)) })],
  [new RegExp(`^X ${ID} ${INT}$`), (m) => ({ kind: 'X', id: m[1]!, status: Number(m[2]) })],
  [new RegExp(`^P ${ID} ${INT}$`), (m) => ({ kind: 'P', id: m[1]!, pid: Number(m[2]) })],
  [new RegExp(`^W ${ID} (\\d{1,10})$`), (m) => ({ kind: 'W', id: m[1]!, bytes: Number(m[2]) })],
  [new RegExp(`^D ${ID} ${INT} ${INT}$`), (m) => ({ kind: 'D', id: m[1]!, code: Number(m[2]), signal: Number(m[3]) })],
  [new RegExp(`^Z ${ID}$`), (m) => ({ kind: 'Z', id: m[1]! })],
];
const FRAME = new RegExp(`^O ${ID} ([123]) (\\d{1,8})$`);

/** Lines are read as latin1 (one char a byte); the E message is the server's UTF-8 text. */
function utf8(latin1: string): string {
  return Buffer.from(latin1, 'latin1').toString('utf8');
}

/**
 * Events from the server's stdout, as its chunks arrive. A line that is no event (or an O header
 * whose length is no frame's) is passed to `onMalformed` and skipped: the next line is read as
 * the next event, so nothing it says can be taken for another's.
 */
export class EventReader {
  private buf: Buffer = Buffer.alloc(0);

  constructor(
    private readonly onEvent: (e: LauncherEvent) => void,
    private readonly onMalformed: (line: string) => void = () => undefined,
  ) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    let off = 0;
    for (;;) {
      const nl = this.buf.indexOf(10, off);
      if (nl < 0) {
        if (this.buf.length - off > LINE_MAX) {
          this.onMalformed(this.buf.toString('latin1', off, off + 200));
          off = this.buf.length;
        }
        break;
      }
      const line = this.buf.toString('latin1', off, nl);
      if (line.startsWith('O ')) {
        const m = FRAME.exec(line);
        const n = m === null ? -1 : Number(m[3]);
        if (m !== null && n <= FRAME_MAX) {
          if (this.buf.length - (nl + 1) < n) break;
          this.onEvent({ kind: 'O', id: m[1]!, stream: Number(m[2]) as 1 | 2 | 3, data: this.buf.subarray(nl + 1, nl + 1 + n) });
          off = nl + 1 + n;
          continue;
        }
      }
      off = nl + 1;
      this.onLine(line);
    }
    this.buf = off >= this.buf.length ? Buffer.alloc(0) : Buffer.from(this.buf.subarray(off));
  }

  private onLine(line: string): void {
    for (const [re, make] of LINES) {
      const m = re.exec(line);
      if (m !== null) {
        this.onEvent(make(m, line));
        return;
      }
    }
    this.onMalformed(line);
  }
}
