/**
 * A unified diff turned around (pure): what `git apply -R` would apply, as a patch of its own.
 * SWE-smith's task instances carry the patch that put the bug in (its harness applies the gold
 * patch with `git apply --reverse`); turned around it is a SWE-bench gold patch like any other.
 *
 * Per file, the header's pairs swap (paths, `old mode`/`new mode`, `new file`/`deleted file`,
 * `rename from`/`rename to`, the `index` line's blob ids) and each hunk's sides swap: its ranges,
 * and its `-` and `+` lines (removed lines first, as diff writes them; a `\ No newline` marker
 * stays with its line). Binary patches and copies have no reverse of this shape: refused.
 */
import { InvalidInputError } from '../errors.js';

const HINT = 'reverse it with `git apply -R` in a checkout, or give the row a gold `patch` that applies forwards';

/** The rest of a line after a prefix, or null. */
function after(line: string, prefix: string): string | null {
  return line.startsWith(prefix) ? line.slice(prefix.length) : null;
}

/** `a/x` <-> `b/x` (also quoted: `"a/x y"`); /dev/null and prefix-less paths stay. */
function swapSide(path: string, to: 'a/' | 'b/'): string {
  const m = /^("?)[ab]\//.exec(path);
  return m === null ? path : `${m[1]}${to}${path.slice(m[0].length)}`;
}

/**
 * The two paths of `diff --git <a> <b>`: the split where both name the same file (a plain
 * change), else the rename's own names; null when neither tells.
 */
function gitPaths(rest: string, renamed: { from?: string; to?: string }): [string, string] | null {
  for (let i = rest.indexOf(' b/'); i >= 0; i = rest.indexOf(' b/', i + 1)) {
    const a = rest.slice(0, i);
    const b = rest.slice(i + 1);
    if (a.slice(2) === b.slice(2)) return [a, b];
  }
  const q = /^("a\/(?:[^"\\]|\\.)*") ("b\/(?:[^"\\]|\\.)*")$/.exec(rest);
  if (q) return [q[1]!, q[2]!];
  if (renamed.from !== undefined && renamed.to !== undefined) return [`a/${renamed.from}`, `b/${renamed.to}`];
  return null;
}

/** One file's header lines (from `diff --git` or `---` up to its first hunk), turned around. */
function reverseHeader(header: readonly string[], where: string): string[] {
  const renamed: { from?: string; to?: string } = {};
  for (const l of header) {
    if (l.startsWith('copy from ') || l.startsWith('copy to '))
      throw new InvalidInputError(`${where}: a patch that copies a file has no reverse as a patch ("${l}")`, HINT);
    if (l.startsWith('GIT binary patch') || (l.startsWith('Binary files ') && l.endsWith(' differ')))
      throw new InvalidInputError(`${where}: cannot reverse a binary patch`, HINT);
    const from = after(l, 'rename from ');
    if (from !== null) renamed.from = from;
    const to = after(l, 'rename to ');
    if (to !== null) renamed.to = to;
  }
  const minus = header.find((l) => l.startsWith('--- '));
  const plus = header.find((l) => l.startsWith('+++ '));
  const oldMode = header.find((l) => l.startsWith('old mode '));
  const newMode = header.find((l) => l.startsWith('new mode '));
  const out: string[] = [];
  for (const l of header) {
    const git = after(l, 'diff --git ');
    if (git !== null) {
      const paths = gitPaths(git, renamed);
      if (paths === null) throw new InvalidInputError(`${where}: cannot tell the two paths of "${l}"`, HINT);
      out.push(`diff --git ${swapSide(paths[1], 'a/')} ${swapSide(paths[0], 'b/')}`);
    } else if (l === minus) {
      out.push(`--- ${swapSide(plus?.slice(4) ?? '/dev/null', 'a/')}`);
    } else if (l === plus) {
      out.push(`+++ ${swapSide(minus?.slice(4) ?? '/dev/null', 'b/')}`);
    } else if (l === oldMode && newMode !== undefined) {
      out.push(`old mode ${newMode.slice('new mode '.length)}`);
    } else if (l === newMode && oldMode !== undefined) {
      out.push(`new mode ${oldMode.slice('old mode '.length)}`);
    } else if (l.startsWith('new file mode ')) {
      out.push(`deleted file mode ${l.slice('new file mode '.length)}`);
    } else if (l.startsWith('deleted file mode ')) {
      out.push(`new file mode ${l.slice('deleted file mode '.length)}`);
    } else if (l.startsWith('rename from ')) {
      out.push(`rename from ${renamed.to ?? ''}`);
    } else if (l.startsWith('rename to ')) {
      out.push(`rename to ${renamed.from ?? ''}`);
    } else {
      const idx = /^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$/.exec(l);
      out.push(idx ? `index ${idx[2]}..${idx[1]}${idx[3]}` : l);
    }
  }
  return out;
}

const HUNK = /^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$/;

function count(range: string): number {
  const c = range.split(',')[1];
  return c === undefined ? 1 : Number(c);
}

/**
 * The hunk starting at `lines[i]`, turned around, and the index after it. Its lines are counted
 * by its header's ranges, since a removed line may look like a `--- ` header.
 */
function reverseHunk(lines: readonly string[], i: number, where: string): { out: string[]; next: number } {
  const m = HUNK.exec(lines[i]!)!;
  let oldLeft = count(m[1]!);
  let newLeft = count(m[2]!);
  const out = [`@@ -${m[2]} +${m[1]} @@${m[3]}`];
  let removed: string[] = [];
  let added: string[] = [];
  const flush = (): void => {
    out.push(...removed, ...added);
    removed = [];
    added = [];
  };
  let j = i + 1;
  let last: string[] | null = null;
  for (; j < lines.length && (oldLeft > 0 || newLeft > 0 || lines[j]!.startsWith('\\')); j++) {
    const l = lines[j]!;
    const tag = l[0];
    if (tag === '\\') {
      (last ?? out).push(l);
    } else if (tag === '-') {
      oldLeft--;
      added.push(`+${l.slice(1)}`);
      last = added;
    } else if (tag === '+') {
      newLeft--;
      removed.push(`-${l.slice(1)}`);
      last = removed;
    } else if (tag === ' ' || l === '') {
      // an empty line is a context line whose leading space was stripped (some editors do)
      flush();
      oldLeft--;
      newLeft--;
      out.push(l);
      last = out;
    } else {
      throw new InvalidInputError(`${where}: hunk "${lines[i]}" ends early, at "${l.slice(0, 60)}"`, HINT);
    }
  }
  flush();
  if (oldLeft > 0 || newLeft > 0) throw new InvalidInputError(`${where}: hunk "${lines[i]}" is cut short`, HINT);
  return { out, next: j };
}

export function reversePatch(patch: string, where = 'patch'): string {
  if (patch === '') return '';
  const lines = patch.split('\n');
  const trailingNewline = lines.at(-1) === '';
  if (trailingNewline) lines.pop();
  const out: string[] = [];
  let header: string[] | null = null;
  const endHeader = (): void => {
    if (header !== null) out.push(...reverseHeader(header, where));
    header = null;
  };
  for (let i = 0; i < lines.length; ) {
    const l = lines[i]!;
    if (l.startsWith('diff --git ') || (l.startsWith('--- ') && header === null && lines[i + 1]?.startsWith('+++ '))) {
      endHeader();
      header = [l];
      i++;
    } else if (HUNK.test(l)) {
      endHeader();
      const h = reverseHunk(lines, i, where);
      out.push(...h.out);
      i = h.next;
    } else if (header !== null) {
      header.push(l);
      i++;
    } else {
      // before the first file (a commit message) or between files: kept as it is
      out.push(l);
      i++;
    }
  }
  endHeader();
  return `${out.join('\n')}${trailingNewline ? '\n' : ''}`;
}
