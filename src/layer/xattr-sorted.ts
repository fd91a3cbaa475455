/**
 * A tree's extended attributes, handed to capture in canonical (byte-wise path) order, in
 * bounded memory. getfattr reports files in directory order, so the attributes must be sorted
 * before capture's walk can consume them; a tree where every file has attributes (SELinux
 * labels, file capabilities) made an in-memory map grow by ~1 KiB per file. Few attributes are
 * sorted in memory; past SPILL_BYTES the lines go through `sort` (external, byte-wise) into a
 * file that capture reads with a cursor.
 *
 * A line is `<hex of the raw relative path>\t<JSON of the attributes>`: hex keeps raw bytes'
 * order and the tab (below every hex digit) puts a path before the paths it prefixes.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { closeSync, openSync, readSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { HostCapabilityError, MinisandboxError } from '../errors.js';

/** xattr name -> base64 value. */
export type Xattrs = Record<string, string>;

/** Attributes per entry, for paths asked in strictly increasing byte-wise order. */
export interface TreeXattrs {
  /** Whether they were many enough to be sorted through a file. */
  readonly spilled: boolean;
  /** The attributes of `rel` (raw relative path bytes), if it has any. Each call's path sorts after the previous one's. */
  take(rel: Buffer): Xattrs | undefined;
  /** Removes the spill file, if any. */
  close(): void;
}

/** Lines kept in memory before they are spilled to `sort`. */
const SPILL_BYTES = 1 << 20;
/** `sort`'s own buffer: it merges temporary files beyond this. */
const SORT_BUFFER = '16M';

/** Collects (path, attributes) pairs in any order; `finish` gives them back in canonical order. */
export class XattrSorter {
  private lines: string[] = [];
  private bytes = 0;
  private sort: { child: ChildProcessByStdio<Writable, null, null>; exited: Promise<void>; path: string } | undefined;

  constructor(private readonly spillDir: string) {}

  /** Adds one path (raw bytes as a latin1 string) with its attributes. Returns false when the caller should await `drained`. */
  add(latin1Path: string, attrs: Xattrs): boolean {
    const line = `${Buffer.from(latin1Path, 'latin1').toString('hex')}\t${JSON.stringify(attrs)}\n`;
    if (this.sort !== undefined) return this.sort.child.stdin.write(line);
    this.lines.push(line);
    this.bytes += line.length;
    if (this.bytes < SPILL_BYTES) return true;
    this.sort = this.startSort();
    const ok = this.sort.child.stdin.write(this.lines.join(''));
    this.lines = [];
    return ok;
  }

  /** Resolves once `sort` takes input again. */
  drained(): Promise<void> {
    const s = this.sort;
    if (s === undefined || !s.child.stdin.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => s.child.stdin.once('drain', resolve));
  }

  async finish(): Promise<TreeXattrs> {
    if (this.sort === undefined) {
      const lines = this.lines.sort();
      this.lines = [];
      return new MemoryXattrs(lines);
    }
    const s = this.sort;
    s.child.stdin.end();
    try {
      await s.exited;
    } catch (e) {
      rmSync(s.path, { force: true });
      throw e;
    }
    return new SpilledXattrs(s.path);
  }

  /** Stops `sort` and removes its output (on a failed capture). */
  abort(): void {
    if (this.sort === undefined) return;
    this.sort.child.kill();
    rmSync(this.sort.path, { force: true });
  }

  private startSort(): { child: ChildProcessByStdio<Writable, null, null>; exited: Promise<void>; path: string } {
    const path = join(this.spillDir, `.xattrs-${process.pid}-${randomBytes(4).toString('hex')}`);
    const child = spawn('sort', ['-S', SORT_BUFFER, '-T', this.spillDir, '-o', path], {
      stdio: ['pipe', 'ignore', 'ignore'],
      env: { ...process.env, LC_ALL: 'C' },
    });
    const exited = new Promise<void>((resolve, reject) => {
      child.on('error', (e) => {
        reject(
          (e as NodeJS.ErrnoException).code === 'ENOENT'
            ? new HostCapabilityError('sort not found: capture needs it to order the extended attributes of large trees', 'install coreutils')
            : e,
        );
      });
      child.on('close', (code) => {
        if (code === 0) resolve();
        else
          reject(
            new MinisandboxError('CAPTURE_XATTR_SORT', `sorting the tree's extended attributes failed (sort exit ${code})`, {
              hint: `check free space in ${this.spillDir}`,
            }),
          );
      });
    });
    exited.catch(() => undefined); // reported by finish()
    child.stdin.on('error', () => undefined); // a dead sort is reported by finish()
    return { child, exited, path };
  }
}

/** Splits a line into its hex key and its attributes. */
function parseLine(line: string): { key: string; attrs: string } {
  const tab = line.indexOf('\t');
  return { key: line.slice(0, tab), attrs: line.slice(tab + 1) };
}

function parseAttrs(json: string): Xattrs {
  const v: unknown = JSON.parse(json);
  if (typeof v !== 'object' || v === null || Object.values(v).some((x) => typeof x !== 'string')) {
    throw new MinisandboxError('CAPTURE_XATTR_SORT', 'a sorted extended-attribute line is malformed', { hint: 'retry the capture' });
  }
  return v as Xattrs;
}

/** Sorted lines in memory (lines end with a newline, which JSON never contains raw). */
class MemoryXattrs implements TreeXattrs {
  readonly spilled = false;
  private next = 0;

  constructor(private readonly lines: string[]) {}

  take(rel: Buffer): Xattrs | undefined {
    if (this.next >= this.lines.length) return undefined;
    const want = rel.toString('hex');
    while (this.next < this.lines.length) {
      const { key, attrs } = parseLine(this.lines[this.next]!);
      if (key > want) return undefined;
      this.next++;
      if (key === want) return parseAttrs(attrs.slice(0, -1));
    }
    return undefined;
  }

  close(): void {
    this.lines.length = 0;
  }
}

/** The sorted file, read forward in chunks. */
class SpilledXattrs implements TreeXattrs {
  readonly spilled = true;
  private fd: number | undefined;
  private readonly buf = Buffer.allocUnsafe(1 << 16);
  private rest = Buffer.alloc(0);
  private pending: { key: string; attrs: string } | undefined;
  private eof = false;

  constructor(private readonly path: string) {
    this.fd = openSync(path, 'r');
  }

  take(rel: Buffer): Xattrs | undefined {
    const want = rel.toString('hex');
    for (;;) {
      this.pending ??= this.readLine();
      if (this.pending === undefined || this.pending.key > want) return undefined;
      const { key, attrs } = this.pending;
      this.pending = undefined;
      if (key === want) return parseAttrs(attrs);
    }
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    rmSync(this.path, { force: true });
  }

  private readLine(): { key: string; attrs: string } | undefined {
    for (;;) {
      const nl = this.rest.indexOf(0x0a);
      if (nl >= 0) {
        // keys are hex; the JSON holds attribute names decoded as UTF-8
        const line = this.rest.toString('utf8', 0, nl);
        this.rest = this.rest.subarray(nl + 1);
        return parseLine(line);
      }
      if (this.eof || this.fd === undefined) return undefined;
      const n = readSync(this.fd, this.buf, 0, this.buf.length, null);
      if (n === 0) this.eof = true;
      else this.rest = Buffer.concat([this.rest, this.buf.subarray(0, n)]);
    }
  }
}
