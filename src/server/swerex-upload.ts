/**
 * SWE-ReX's `/upload`: one file written to `target_path`, or (`unzip`) a directory, which its
 * client sends zipped, extracted into `target_path`. Everything is written from inside the
 * sandbox: the zip is read here (yauzl, which refuses absolute and `..` names; checked again
 * below), turned into a tar of plain files and directories, and unpacked by the sandbox's own
 * `tar` under the target, so no entry name and no link in the sandbox can reach a host path.
 */
import { posix } from 'node:path';
import { pack } from 'tar-stream';
import yauzl from 'yauzl';
import { MinisandboxError } from '../errors.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { builtin, pyRepr, SwerexError } from './swerex-exceptions.js';
import { writeText } from './swerex-exec.js';

interface ZipItem {
  /** Relative, normalized, no `..`. */
  name: string;
  dir: boolean;
  mode: number;
  data: Buffer;
}

/** Zip entry names that could leave the target: refused, never cleaned up into something else. */
export function unsafeEntryName(name: string): boolean {
  if (name.startsWith('/') || name.includes('\\') || name.includes('\0') || /^[A-Za-z]:/.test(name)) return true;
  return name.split('/').some((part) => part === '..');
}

/** Reads a zip held in memory, at most `maxBytes` uncompressed in all. */
export function readZip(buf: Buffer, maxBytes: number): Promise<ZipItem[]> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(buf, { lazyEntries: true, decodeStrings: true, validateEntrySizes: true }, (err, zip) => {
      if (err !== null) return reject(zipError(err));
      const items: ZipItem[] = [];
      let total = 0;
      const fail = (e: Error): void => {
        zip.close();
        reject(e);
      };
      zip.on('error', (e: Error) => reject(zipError(e)));
      zip.on('end', () => resolve(items));
      zip.on('entry', (entry: yauzl.Entry) => {
        const raw = entry.fileName;
        if (unsafeEntryName(raw)) return fail(unsafeEntry(raw));
        const dir = raw.endsWith('/');
        const name = posix.normalize(raw).replace(/\/+$/, '');
        if (name === '' || name === '.') return zip.readEntry();
        // unix-made entries keep their permission bits (not setuid/setgid/sticky); others get the usual ones
        const unixMode = entry.versionMadeBy >> 8 === 3 ? (entry.externalFileAttributes >>> 16) & 0o777 : 0;
        const mode = unixMode !== 0 ? unixMode | 0o600 : dir ? 0o755 : 0o644;
        if (dir) {
          items.push({ name, dir, mode: mode | 0o700, data: Buffer.alloc(0) });
          return zip.readEntry();
        }
        total += entry.uncompressedSize;
        if (total > maxBytes) return fail(tooLarge(maxBytes));
        zip.openReadStream(entry, (e2, stream) => {
          if (e2 !== null) return fail(zipError(e2));
          const chunks: Buffer[] = [];
          stream.on('data', (c: Buffer) => chunks.push(c));
          stream.on('error', (e3: Error) => fail(zipError(e3)));
          stream.on('end', () => {
            // a symlink entry becomes a file holding its target, as Python's zipfile extracts it
            items.push({ name, dir: false, mode, data: Buffer.concat(chunks) });
            zip.readEntry();
          });
        });
      });
      zip.readEntry();
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

/** A tar of the items (every parent directory first), owned by root. */
export async function tarOf(items: ZipItem[]): Promise<Buffer> {
  const dirs = new Map<string, number>();
  for (const it of items) {
    const parts = it.name.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/');
      if (!dirs.has(d)) dirs.set(d, 0o755);
    }
    if (it.dir) dirs.set(it.name, it.mode);
  }
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const ended = new Promise<void>((resolve, reject) => {
    p.on('end', resolve);
    p.on('error', reject);
  });
  const when = new Date(0);
  for (const [name, mode] of [...dirs].sort(([a], [b]) => a.localeCompare(b)))
    p.entry({ name: `${name}/`, type: 'directory', mode, uid: 0, gid: 0, mtime: when });
  for (const it of items) if (!it.dir) p.entry({ name: it.name, type: 'file', mode: it.mode, uid: 0, gid: 0, mtime: when, size: it.data.length }, it.data);
  p.finalize();
  await ended;
  return Buffer.concat(chunks);
}

/** Unpacks a zipped directory into `target` (made if missing) inside the sandbox. */
export async function uploadZip(sb: Sandbox, zip: Buffer, target: string, maxBytes: number): Promise<void> {
  const tar = await tarOf(await readZip(zip, maxBytes));
  const o = await sb.exec(['/bin/sh', '-c', 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', 'msb-unzip', target], { stdin: tar, timeoutMs: 300_000 });
  if (o.status !== 'ok' || o.exitCode !== 0) {
    if (o.stderr.includes('Permission denied')) throw builtin('PermissionError', `[Errno 13] Permission denied: ${pyRepr(target)}`);
    throw builtin('OSError', `extracting into ${target} failed (${o.status}, exit ${o.exitCode}): ${o.stderr.trim().slice(-500)}`);
  }
}

/** Writes one uploaded file to `target` (parents made), as SWE-ReX moves it there. */
export async function uploadFile(sb: Sandbox, data: Buffer, target: string): Promise<void> {
  await writeText(sb, target, data);
}
