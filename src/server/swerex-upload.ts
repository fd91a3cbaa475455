/**
 * SWE-ReX's `/upload`: one file written to `target_path`, or (`unzip`) a directory, which its
 * client sends zipped, extracted into `target_path`. The upload arrives spooled to a file on the
 * host (the route counts it there); everything is written from inside the sandbox: the zip is read
 * (yauzl, which refuses absolute and `..` names; checked again below) entry by entry, each entry
 * inflated straight into a tar of plain files and directories that the sandbox's own `tar` unpacks
 * under the target as it streams in, so no entry name and no link in the sandbox can reach a host
 * path, and no entry is ever whole in memory: a small zip that inflates to the size limit costs
 * the server a few buffers, not the inflated size.
 */
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { type Pack, pack } from 'tar-stream';
import yauzl from 'yauzl';
import { MinisandboxError } from '../errors.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { streamInSandbox } from '../sandbox/stream.js';
import { writeFileFrom } from './file-transfer.js';
import { builtin, pyRepr, SwerexError } from './swerex-exceptions.js';
import { writeError } from './swerex-exec.js';

interface ZipItem {
  /** Relative, normalized, no `..`. */
  name: string;
  dir: boolean;
  mode: number;
}

/** Zip entry names that could leave the target: refused, never cleaned up into something else. */
export function unsafeEntryName(name: string): boolean {
  if (name.startsWith('/') || name.includes('\\') || name.includes('\0') || /^[A-Za-z]:/.test(name)) return true;
  return name.split('/').some((part) => part === '..');
}

/** What an entry is extracted as; undefined for the target itself. Throws for a name that would leave it. */
function itemOf(entry: yauzl.Entry): ZipItem | undefined {
  const raw = entry.fileName;
  if (unsafeEntryName(raw)) throw unsafeEntry(raw);
  const dir = raw.endsWith('/');
  const name = posix.normalize(raw).replace(/\/+$/, '');
  if (name === '' || name === '.') return undefined;
  // unix-made entries keep their permission bits (not setuid/setgid/sticky); others get the usual ones
  const unixMode = entry.versionMadeBy >> 8 === 3 ? (entry.externalFileAttributes >>> 16) & 0o777 : 0;
  const mode = unixMode !== 0 ? unixMode | 0o600 : dir ? 0o755 : 0o644;
  return { name, dir, mode: dir ? mode | 0o700 : mode };
}

/**
 * Walks the zip in `file` entry by entry: `visit` gets each one and says when to go on. Rejects
 * with the first error, the zip closed.
 */
function walkZip(file: string, visit: (zip: yauzl.ZipFile, entry: yauzl.Entry) => Promise<void>): Promise<void> {
  return new Promise((resolve, reject) => {
    yauzl.open(file, { lazyEntries: true, decodeStrings: true, validateEntrySizes: true }, (err, zip) => {
      if (err !== null) return reject(zipError(err));
      let failed = false;
      const fail = (e: unknown): void => {
        if (failed) return;
        failed = true;
        zip.close();
        reject(e);
      };
      zip.on('error', (e: Error) => fail(zipError(e)));
      zip.on('end', () => {
        if (!failed) resolve();
      });
      zip.on('entry', (entry: yauzl.Entry) => {
        visit(zip, entry).then(() => zip.readEntry(), fail);
      });
      zip.readEntry();
    });
  });
}

/** Every entry's name checked, and their sizes added up, before anything is extracted. */
async function checkZip(file: string, maxBytes: number): Promise<void> {
  let total = 0;
  await walkZip(file, async (_zip, entry) => {
    const item = itemOf(entry);
    if (item === undefined || item.dir) return;
    total += entry.uncompressedSize;
    if (total > maxBytes) throw tooLarge(maxBytes);
  });
}

/** One tar entry written to `p`, from `body` if given; rejects if the tar is destroyed meanwhile. */
/** The tar in the sandbox ended before all entries were written (its own error says why). */
class TarEndedError extends Error {}

function tarEntry(p: Pack, header: Parameters<Pack['entry']>[0], body?: Readable): Promise<void> {
  return new Promise((resolve, reject) => {
    const onClose = (): void => reject(new TarEndedError('the extraction in the sandbox ended early'));
    p.once('close', onClose);
    const done = (e?: Error | null): void => {
      p.off('close', onClose);
      if (e) reject(e);
      else resolve();
    };
    if (body === undefined) {
      p.entry(header, done);
      return;
    }
    const sink = p.entry(header, done);
    // its error (the body's, passed on below) is the entry's failure, reported through `done`
    sink.on('error', () => undefined);
    body.on('error', (e: Error) => {
      p.off('close', onClose);
      sink.destroy(e);
      reject(e);
    });
    body.pipe(sink);
  });
}

/** The zip's entries, in its order, as a tar (owned by root) into `p`: each file's parents first. */
async function zipToTar(file: string, p: Pack): Promise<void> {
  const when = new Date(0);
  const made = new Set<string>();
  const parents = async (name: string): Promise<void> => {
    const parts = name.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/');
      if (made.has(d)) continue;
      made.add(d);
      await tarEntry(p, { name: `${d}/`, type: 'directory', mode: 0o755, uid: 0, gid: 0, mtime: when });
    }
  };
  await walkZip(file, async (zip, entry) => {
    const item = itemOf(entry);
    if (item === undefined) return;
    await parents(item.name);
    if (item.dir) {
      made.add(item.name);
      await tarEntry(p, { name: `${item.name}/`, type: 'directory', mode: item.mode, uid: 0, gid: 0, mtime: when });
      return;
    }
    const body = await new Promise<Readable>((resolve, reject) => zip.openReadStream(entry, (e, s) => (e !== null ? reject(zipError(e)) : resolve(s))));
    // a symlink entry becomes a file holding its target, as Python's zipfile extracts it
    const header = { name: item.name, type: 'file' as const, mode: item.mode, uid: 0, gid: 0, mtime: when, size: entry.uncompressedSize };
    // the entry's data failing (a size the zip lied about, corrupt deflate) is the zip's fault
    await tarEntry(p, header, body).catch((e: unknown) => {
      throw e instanceof TarEndedError || !(e instanceof Error) ? e : zipError(e);
    });
  });
}

function unsafeEntry(name: string): SwerexError {
  return builtin('ValueError', `refused to extract the zip: entry ${pyRepr(name)} is an absolute path or leaves the target with ..; nothing was extracted`);
}

function tooLarge(maxBytes: number): MinisandboxError {
  return new MinisandboxError('BODY_TOO_LARGE', `the zip holds more than ${maxBytes} bytes uncompressed`, {
    hint: 'upload less at once, or several directories one by one',
  });
}

function zipError(e: Error): SwerexError {
  if (/absolute path|invalid relative path|invalid characters/i.test(e.message)) {
    return builtin('ValueError', `refused to extract the zip: ${e.message}; nothing was extracted`);
  }
  return new SwerexError('zipfile.BadZipFile', `not a valid zip file: ${e.message}`);
}

/**
 * Unpacks the zipped directory in `file` into `target` (made if missing) inside the sandbox. Its
 * names and sizes are checked first, so a hostile entry anywhere extracts nothing; an entry whose
 * data turns out corrupt stops the extraction there, as Python's extractall does.
 */
export async function uploadZip(sb: Sandbox, file: string, target: string, maxBytes: number, signal?: AbortSignal): Promise<void> {
  await checkZip(file, maxBytes);
  const p = pack();
  // an entry that fails destroys the tar with its error, which `produced` below reports
  p.on('error', () => undefined);
  const cmd = streamInSandbox(sb, ['/bin/sh', '-c', 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', 'msb-unzip', target], {
    // a node stream for the command's stdin; the pack's backpressure goes through its iterator
    stdin: Readable.from(p),
    timeoutMs: 300_000,
    ...(signal === undefined ? {} : { signal }),
  });
  cmd.stdout.resume();
  const produced = zipToTar(file, p).then(
    () => {
      p.finalize();
      return undefined;
    },
    (e: unknown) => {
      p.destroy();
      cmd.kill();
      return e;
    },
  );
  const r = await cmd.done;
  // a tar that ended early takes no more entries: the writing stops
  if (r.exitCode !== 0) p.destroy();
  const failure = await produced;
  // the zip's own failure first (it killed the tar); else the tar's
  if (failure !== undefined && !(failure instanceof TarEndedError)) throw failure;
  if (r.exitCode !== 0) {
    if (r.stderr.includes('Permission denied')) throw builtin('PermissionError', `[Errno 13] Permission denied: ${pyRepr(target)}`);
    throw builtin('OSError', `extracting into ${target} failed (exit ${r.exitCode}): ${r.stderr.trim().slice(-500)}`);
  }
}

/** Writes the uploaded file spooled in `file` to `target` (parents made), as SWE-ReX moves it there. */
export async function uploadFile(sb: Sandbox, file: string, target: string, signal?: AbortSignal): Promise<void> {
  try {
    await writeFileFrom(sb, target, file, signal === undefined ? {} : { signal });
  } catch (e) {
    throw writeError(e, target);
  }
}
