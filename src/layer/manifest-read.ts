/**
 * Streaming, validating manifest reader. A registry may be hostile, so beyond what
 * parseEntryLine checks line by line (schema, safe path, strict order) it checks the manifest
 * as a whole: the header, canonical form, a final newline (no truncation), hardlinks only to
 * an earlier `file` entry, no entry below a non-directory entry (a path through a symlink), and
 * every entry's parent a `dir` entry of the layer (a layer is laid out as a tree of its own:
 * the lay-out makes no directory the manifest does not hold). What this reader accepts, a
 * lay-out accepts: `verify` and `import` run it to find what a pull would refuse.
 *
 * native/fsmeta-manifest.c applies the same rules to the manifests the lay-out helper reads
 * itself (see store/pull.ts): a change here must be made there too.
 *
 * Memory: a 32-byte hash per `file` and `dir` entry (for the hardlink and parent checks) and a
 * short chain of recent non-directory entries; never the manifest itself.
 * A consumer that checks hardlink targets and parents against what it laid out itself, exactly
 * (materialize does), may leave those checks out (`parentsAndLinks: 'caller'`): hashing every
 * file's path was about a tenth of the node side of a lay-out (measured).
 */
import { createHash, hash as oneShotHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { InvalidInputError, UnsafePathError } from '../errors.js';
import { DigestSet } from './capture-digestset.js';
import { OpenSubtrees } from './open-subtrees.js';
import { fastEntryLine } from './capture-line.js';
import { MANIFEST_HEADER, parseEntryLine, type Entry } from './manifest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { decodePath, encodePath } from './path.js';

const HEADER_LINE = canonicalJson(MANIFEST_HEADER);
const utf8 = new TextDecoder('utf-8', { fatal: true });

export async function* readManifest(source: Readable | string, label: string, opts: { parentsAndLinks?: 'checked' | 'caller' } = {}): AsyncIterable<Entry> {
  const stream = typeof source === 'string' ? createReadStream(source, { highWaterMark: 1 << 20 }) : source;
  const here = opts.parentsAndLinks !== 'caller';
  const check = new ManifestChecker(label, { parents: here, hardlinks: here });
  let rest: Buffer | undefined;
  let lineNo = 0;
  try {
    for await (const chunk of stream) {
      const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, 'utf8');
      const buf: Buffer = rest === undefined ? bytes : Buffer.concat([rest, bytes]);
      let start = 0;
      for (let nl = buf.indexOf(0x0a, start); nl >= 0; nl = buf.indexOf(0x0a, start)) {
        const e = check.line(decodeLine(buf.subarray(start, nl), ++lineNo, label), lineNo);
        start = nl + 1;
        if (e !== undefined) yield e;
      }
      rest = start < buf.length ? Buffer.from(buf.subarray(start)) : undefined;
    }
  } finally {
    if (typeof source === 'string') stream.destroy();
  }
  if (rest !== undefined)
    throw new InvalidInputError(`${label}: truncated manifest: line ${lineNo + 1} has no final newline`, 'the manifest blob is incomplete; re-push the layer');
  if (lineNo === 0) throw new InvalidInputError(`${label}: empty manifest (no header line)`, 'the manifest blob is incomplete; re-push the layer');
}

function decodeLine(b: Buffer, lineNo: number, label: string): string {
  try {
    return utf8.decode(b);
  } catch {
    throw new InvalidInputError(`${label}: line ${lineNo}: not valid UTF-8`);
  }
}

/** What the whole-manifest rules look at in an entry (a hardlink's target is its file's path). */
export type Shape = { type: Entry['type']; path: string; target?: string };

/** The whole-manifest rules, fed one line at a time; pure apart from its own state. */
export class ManifestChecker {
  private prev: string | undefined;
  private headerSeen = false;
  private readonly files = new DigestSet();
  private readonly dirs = new DigestSet();
  /** The last parent found among `dirs` (entries of one directory come in runs). */
  private lastParent: Buffer = Buffer.alloc(0);
  /** Non-directory entries whose subtree a later entry may still fall in. */
  private readonly open = new OpenSubtrees<{ raw: Buffer; path: string }>();

  constructor(
    private readonly label: string,
    /** Which of the checks that need memory per entry run here (see readManifest). */
    private readonly checks: { parents: boolean; hardlinks: boolean } = { parents: true, hardlinks: true },
  ) {}

  line(line: string, lineNo: number): Entry | undefined {
    if (!this.headerSeen) {
      if (line !== HEADER_LINE)
        throw new InvalidInputError(
          `${this.label}: line 1 is not the layer manifest header ${HEADER_LINE}`,
          'this is not a minisandbox layer manifest, or it is truncated at the start',
        );
      this.headerSeen = true;
      return undefined;
    }
    const e = parseEntryLine(line, lineNo, this.prev, this.label);
    if (fastEntryLine(e) !== `${line}\n`)
      throw new InvalidInputError(`${this.label}: line ${lineNo}: entry ${JSON.stringify(e.path)} is not in canonical form`);
    this.prev = e.path;
    this.together(e, decodePath(e.path));
    return e;
  }

  /**
   * The rules on entries together (see `together`) for the entries a writer emits, in order, as
   * canonical lines of its own making (an image layer's converter): what a pull would refuse of
   * its manifest is refused as it is written, without reading it back.
   */
  emitted(e: Shape, raw: Buffer): void {
    if (this.prevRaw !== undefined && Buffer.compare(this.prevRaw, raw) >= 0)
      throw new InvalidInputError(`${this.label}: entry ${JSON.stringify(e.path)} is out of order or duplicated`);
    this.prevRaw = raw;
    this.together(e, raw);
  }

  private prevRaw: Buffer | undefined;

  /** Parents, paths through non-directories and hardlink targets: what one line cannot show. */
  private together(e: Shape, raw: Buffer): void {
    this.checkParents(e, raw);
    if (this.checks.parents) this.checkParentDir(e, raw);
    if (this.checks.hardlinks) this.trackHardlinks(e, raw);
    // only non-directories can make a later path unsafe, and their ranges nest like any others'
    if (e.type !== 'dir') this.open.push({ raw, path: e.path });
  }

  /** The parent must be an earlier `dir` entry (or the root): the lay-out makes no other directory. */
  private checkParentDir(e: Shape, raw: Buffer): void {
    const slash = raw.lastIndexOf(0x2f);
    const parent = slash < 0 ? raw.subarray(0, 0) : raw.subarray(0, slash);
    if (parent.length > 0 && !parent.equals(this.lastParent)) {
      if (!this.dirs.has(pathKey(parent)))
        throw new UnsafePathError(
          e.path,
          `its parent ${JSON.stringify(encodePath(parent))} is not a directory entry of this layer (a layer holds every directory it has an entry in)`,
        );
      this.lastParent = Buffer.from(parent);
    }
    if (e.type === 'dir') this.dirs.add(pathKey(raw));
  }

  /** A hardlink must name an earlier `file` entry: files are remembered by a hash of their path. */
  private trackHardlinks(e: Shape, raw: Buffer): void {
    if (e.type === 'hardlink') {
      if (e.target === undefined || !this.files.has(pathKey(decodePath(e.target)))) {
        throw new UnsafePathError(e.path, `hardlink target ${JSON.stringify(e.target)} is not an earlier file entry of this layer`);
      }
    } else if (e.type === 'file') this.files.add(pathKey(raw));
  }

  /** No entry below a non-directory (see OpenSubtrees): a path through a symlink or file. */
  private checkParents(e: Shape, raw: Buffer): void {
    this.open.advance(raw);
    const o = this.open.ancestorOf(raw);
    if (o !== undefined)
      throw new UnsafePathError(e.path, `its parent ${JSON.stringify(o.path)} is not a directory in this layer (a path through a symlink or file)`);
  }
}

function pathKey(raw: Buffer): Buffer {
  // one-shot hash (Node >= 20.12) costs half of createHash's object per call
  return typeof oneShotHash === 'function' ? oneShotHash('sha256', raw, 'buffer') : createHash('sha256').update(raw).digest();
}
