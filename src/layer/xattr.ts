/**
 * Extended attributes of a whole tree. Node has no xattr API, and spawning getfattr per file
 * costs milliseconds each, so one helper process (native/xattr-dump.c) dumps the tree in
 * getfattr's format; the files that have attributes are streamed into an XattrSorter, which hands
 * them to capture in canonical order without holding them all in memory. Not `getfattr -R`: it
 * walks by whole path, so a directory swapped for a symlink mid-walk led it out of the tree; the
 * helper walks relative to held directory fds and never follows a link (see there).
 */
import { spawn } from 'node:child_process';
import { InvalidInputError } from '../errors.js';
import { nativeHelper } from '../util/native.js';
import { XattrSorter, type TreeXattrs, type Xattrs } from './xattr-sorted.js';

export type { TreeXattrs, Xattrs } from './xattr-sorted.js';

/**
 * Dumps every attribute in every namespace the caller may read (as root: trusted.* and
 * security.* too), symlinks' own included. The root's own attributes are not included. `root` is
 * opened as given (capture passes its held fd's /proc path). A large set is sorted in a file under
 * `spillDir`, removed by `close()`.
 */
export async function readTreeXattrs(root: string, spillDir: string): Promise<TreeXattrs> {
  const child = spawn(await nativeHelper('xattr-dump'), [root], { stdio: ['ignore', 'pipe', 'pipe'] });
  const sorter = new XattrSorter(spillDir);
  const parser = new GetfattrParser(root, (path, attrs) => sorter.add(path, attrs));
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d: string) => {
    if (stderr.length < 4096) stderr += d;
  });
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code));
  });
  try {
    for await (const chunk of child.stdout) {
      parser.push(chunk as Buffer);
      await sorter.drained();
    }
    const code = await exited;
    parser.end();
    if (code !== 0 && stderr.includes('File name too long')) {
      // a known limit: paths are handled as whole strings, so none may exceed PATH_MAX
      throw new InvalidInputError(
        `capture: the tree under ${root} has paths longer than PATH_MAX (4096 bytes)`,
        'capture from a shorter root path or flatten the tree',
      );
    }
    if (code !== 0)
      throw new InvalidInputError(
        `reading the extended attributes under ${root} failed (exit ${code}): ${stderr.trim().slice(0, 500)}`,
        'check that the tree is readable and unchanged during capture',
      );
  } catch (e) {
    child.kill();
    sorter.abort();
    throw e;
  }
  return sorter.finish();
}

/**
 * Parses getfattr's dump format: `# file: NAME`, then `name=0sBASE64` lines, then a blank line.
 * getfattr writes names with backslash, newline and other control bytes as `\ooo` octal escapes
 * and every other byte raw, so the stream is split on raw newlines and unescaped byte-wise.
 */
export class GetfattrParser {
  private readonly prefix: string;
  private rest = '';
  private current: { key: string; attrs: Xattrs } | undefined;

  /** `onFile` gets each file that has attributes: its relative path's raw bytes as a latin1 string, and the attributes. */
  constructor(
    root: string,
    private readonly onFile: (latin1Path: string, attrs: Xattrs) => void,
  ) {
    this.prefix = Buffer.from(root.endsWith('/') ? root : `${root}/`, 'utf8').toString('latin1');
  }

  push(chunk: Buffer): void {
    // latin1 maps each byte to one char, so lines and escapes can be handled as strings
    const text = this.rest + chunk.toString('latin1');
    const lines = text.split('\n');
    this.rest = lines.pop() ?? '';
    for (const line of lines) this.line(line);
  }

  end(): void {
    if (this.rest !== '') this.line(this.rest);
    this.rest = '';
    this.flush();
  }

  private line(line: string): void {
    if (line.startsWith('# file: ')) {
      this.flush();
      const abs = unescapeOctal(line.slice(8));
      const rootNoSlash = this.prefix.slice(0, -1);
      if (abs === rootNoSlash) {
        this.current = undefined;
        return;
      }
      if (!abs.startsWith(this.prefix)) throw new InvalidInputError(`getfattr reported ${JSON.stringify(abs)} outside ${rootNoSlash}`);
      this.current = { key: abs.slice(this.prefix.length), attrs: {} };
      return;
    }
    if (line === '') {
      this.flush();
      return;
    }
    if (this.current === undefined) return; // the root's own attributes: the root is not an entry
    const eq = line.indexOf('=');
    const rawName = eq < 0 ? line : line.slice(0, eq);
    const rawValue = eq < 0 ? '' : line.slice(eq + 1);
    const name = Buffer.from(unescapeOctal(rawName), 'latin1').toString('utf8');
    let value: string;
    if (rawValue.startsWith('0s')) value = rawValue.slice(2);
    else if (rawValue === '') value = '';
    else throw new InvalidInputError(`getfattr: unexpected value encoding for ${name}: ${rawValue.slice(0, 20)}`);
    // overlayfs bookkeeping (origin, impure, uuid, ...) is never recorded: drop it here, so
    // the map stays small for upper dirs where every copied-up file carries some
    if (OVERLAY_NOISE.test(name)) return;
    this.current.attrs[name] = value;
  }

  private flush(): void {
    if (this.current !== undefined && Object.keys(this.current.attrs).length > 0) this.onFile(this.current.key, this.current.attrs);
    this.current = undefined;
  }
}

/** overlayfs attributes other than the ones capture interprets or refuses. */
const OVERLAY_NOISE = /^(trusted|user)\.overlay\.(?!(opaque|whiteout|redirect|metacopy)$)/;

function unescapeOctal(s: string): string {
  if (!s.includes('\\')) return s;
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}
