/**
 * File bodies between a client and a sandbox through bounded buffers: a read streams from the
 * sandbox's `cat` to the socket at the client's pace (a command spawned with pipes, so the
 * client's backpressure reaches it), and an upload is counted onto a spool file on the host, then
 * streamed from it into the sandbox. Nothing holds a body whole: its size limit is a limit on
 * bytes, not on the server's memory. Reads and writes run inside the sandbox, so every path (and
 * every symlink a task planted) resolves in its own root.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { InvalidInputError, MinisandboxError } from '../errors.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { type StreamedCommand, streamInSandbox } from '../sandbox/stream.js';
import type { StorePaths } from '../store/paths.js';
import type { Entry } from './manager.js';
import { ownedName } from '../util/owned-name.js';

/** How long a transfer may take: the client sets its pace, so it is long. */
const TRANSFER_TIMEOUT_MS = 3_600_000;

/**
 * The file's raw mode (hex), size and permission bits on a first line (`- - -` where stat
 * cannot say), then its bytes. One command, so the size checked is the size of the file read.
 * The stat is the tenant's to replace: the shell prints the line only if it is hex digits and
 * spaces, so no other bytes (a newline, a header line of its own) can get in front of the file's.
 */
const READ_SCRIPT = [
  `s=$(stat -L -c '%f %s %a' -- "$1" 2>/dev/null) || s='- - -'`,
  `case $s in ''|*[!0-9a-f\\ ]*) s='- - -' ;; esac`,
  `printf '%s\\n' "$s" && exec cat -- "$1"`,
].join('; ');

/** As Sandbox.writeFile does it, the bytes from stdin. */
const WRITE_SCRIPT = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1" && if [ -n "$2" ]; then chmod "$2" -- "$1"; fi';

export class BodyTooLargeError extends MinisandboxError {
  constructor(limit: number) {
    super('BODY_TOO_LARGE', `the body is larger than ${limit} bytes`, { hint: 'send less at once, or raise the server limit' });
  }
}

function fileError(op: string, path: string, why: string): MinisandboxError {
  return new MinisandboxError('SANDBOX_FILE', `cannot ${op} ${path} in the sandbox: ${why.trim().slice(-300)}`, {
    hint: 'check the path exists (for reads) and that the sandbox is alive; paths are resolved inside the sandbox',
  });
}

export function tooLargeToRead(path: string, limit: number): InvalidInputError {
  return new InvalidInputError(`${path} is larger than ${limit} bytes`, 'read it in parts with exec (e.g. head -c, tail -c)');
}

/** The sandbox counts as used until `done` settles: a long transfer is use, which the idle reaper leaves alone. */
export function busyUntil(e: Entry, done: Promise<unknown>): void {
  e.busy++;
  e.lastUsed = Date.now();
  const end = (): void => {
    e.busy--;
    e.lastUsed = Date.now();
  };
  void done.then(end, end);
}

export interface FileRead {
  /** Permission bits in octal (`644`), where stat could say. */
  mode: string | undefined;
  /** The bytes, ending where the file does; broken off (an error) past the limit or if the read fails midway. */
  body: Readable;
  /** Settles when the command has ended. */
  done: Promise<unknown>;
}

/**
 * Starts reading `path` inside the sandbox. What fails before a byte of the file arrived (no such
 * file, a directory, no permission, a regular file over `limit`) rejects, so it can be answered
 * as an error; what fails later breaks the body off. A file whose size stat cannot tell (a
 * device, a /proc file) streams until `limit`, then breaks off.
 */
export async function readFileStream(sb: Sandbox, path: string, opts: { limit: number; signal?: AbortSignal }): Promise<FileRead> {
  const cmd = streamInSandbox(sb, ['/bin/sh', '-c', READ_SCRIPT, 'msb-read', path], {
    timeoutMs: TRANSFER_TIMEOUT_MS,
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
  });
  const it = (cmd.stdout as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  try {
    let head: Buffer = Buffer.alloc(0);
    let nl = -1;
    while (nl < 0) {
      const r = await it.next();
      if (r.done === true) {
        const d = await cmd.done;
        throw fileError('read', path, d.stderr || `exit ${d.exitCode}`);
      }
      head = head.length === 0 ? r.value : Buffer.concat([head, r.value]);
      nl = head.indexOf(0x0a);
      if (nl < 0 && head.length > 4096) throw fileError('read', path, 'the sandbox answered the stat of the file with something unexpected');
    }
    const m = /^([0-9a-f]+) (\d+) ([0-7]+)$/.exec(head.toString('latin1', 0, nl));
    const rawMode = m === null ? undefined : parseInt(m[1]!, 16);
    if (rawMode !== undefined && (rawMode & 0o170000) === 0o040000) throw fileError('read', path, 'Is a directory');
    if (rawMode !== undefined && (rawMode & 0o170000) === 0o100000 && Number(m![2]) > opts.limit) throw tooLargeToRead(path, opts.limit);
    let first: Buffer | undefined = head.subarray(nl + 1);
    if (first.length === 0) {
      const r = await it.next();
      first = r.done === true ? undefined : r.value;
    }
    if (first === undefined) {
      // nothing to send: an empty file, or one cat could not read
      const d = await cmd.done;
      if (d.exitCode !== 0) throw fileError('read', path, d.stderr || `exit ${d.exitCode}`);
      return { mode: m?.[3], body: Readable.from([]), done: cmd.done };
    }
    const body = Readable.from(rest(first, it, cmd, path, opts.limit), { objectMode: false });
    // a read that failed or was killed (the sandbox ended) breaks the body off at once, even while
    // a client that stopped reading holds it at a chunk not yet taken
    void cmd.done.then((d) => {
      if (d.exitCode !== 0) body.destroy(fileError('read', path, d.stderr || `exit ${d.exitCode}`));
    });
    return { mode: m?.[3], body, done: cmd.done };
  } catch (e) {
    cmd.kill();
    throw e;
  }
}

async function* rest(first: Buffer, it: AsyncIterator<Buffer>, cmd: StreamedCommand, path: string, limit: number): AsyncGenerator<Buffer> {
  let sent = 0;
  try {
    for (let chunk: Buffer | undefined = first; chunk !== undefined; ) {
      sent += chunk.length;
      if (sent > limit) throw tooLargeToRead(path, limit);
      yield chunk;
      const r = await it.next();
      chunk = r.done === true ? undefined : r.value;
    }
    const d = await cmd.done;
    // a read that failed midway must not look like a whole, shorter file
    if (d.exitCode !== 0) throw fileError('read', path, d.stderr || `exit ${d.exitCode}`);
  } finally {
    // the client went away, or the limit was passed: the cat ends with the body
    cmd.kill();
  }
}

/**
 * `src` counted onto a new file `file` (mode 0600), at most `limit` bytes (BodyTooLargeError
 * past it, the rest of `src` not read); a client gone midway (`signal`) rejects too.
 */
export async function spoolBody(src: Readable, limit: number, file: string, signal?: AbortSignal): Promise<number> {
  let seen = 0;
  let over = false;
  const onAbort = (): void => void src.destroy(new Error('the client went away'));
  if (signal?.aborted === true) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await pipeline(
      src,
      async function* count(chunks: AsyncIterable<Buffer>) {
        for await (const c of chunks) {
          seen += c.length;
          if (seen > limit) {
            over = true;
            throw new BodyTooLargeError(limit);
          }
          yield c;
        }
      },
      createWriteStream(file, { mode: 0o600 }),
    );
  } catch (e) {
    if (over) throw new BodyTooLargeError(limit);
    if (e instanceof MinisandboxError) throw e;
    throw new MinisandboxError('TRUNCATED_BODY', `the upload broke off: ${(e as Error).message}`, { hint: 'send it again' });
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  return seen;
}

/**
 * A fresh directory for spooling uploads (under the store's tmp dir where there is one), named
 * `prefix` and its owner (store/leftovers.ts reaps those of a killed server), removed after `fn`.
 */
export async function withSpoolDir<T>(store: StorePaths | undefined, prefix: 'upload-' | 'tar-upload-', fn: (dir: string) => Promise<T>): Promise<T> {
  if (store !== undefined) await mkdir(store.tmpDir, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(store?.tmpDir ?? tmpdir(), ownedName(prefix, '')));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Writes the spooled `file` to `path` inside the sandbox (parents made, `mode` set if given), as
 * Sandbox.writeFile does; a failure is SANDBOX_FILE with the sandbox's error text.
 */
export async function writeFileFrom(sb: Sandbox, path: string, file: string, opts: { mode?: number; signal?: AbortSignal } = {}): Promise<void> {
  const mode = opts.mode === undefined ? '' : opts.mode.toString(8);
  const cmd = streamInSandbox(sb, ['/bin/sh', '-c', WRITE_SCRIPT, 'msb-write', path, mode], {
    stdin: createReadStream(file),
    timeoutMs: TRANSFER_TIMEOUT_MS,
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
  });
  cmd.stdout.resume();
  const d = await cmd.done;
  if (d.exitCode !== 0) throw fileError('write', path, d.stderr || `exit ${d.exitCode}`);
}
