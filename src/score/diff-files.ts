/**
 * What a unified diff touches, read the way the harness reads a test patch: the files it modifies
 * (reset to the base commit before and after the tests) and the test directives appended to the
 * test command.
 */

export interface DiffFile {
  /** Path before the change, without the `a/` prefix; null for a created file. */
  oldPath: string | null;
  /** Path after the change, without the `b/` prefix; null for a deleted file. */
  newPath: string | null;
}

/** Git C-quotes paths with unusual bytes: "a/sp\303\244ce". */
function unquote(path: string): string {
  if (!path.startsWith('"') || !path.endsWith('"')) return path;
  const body = path.slice(1, -1);
  const bytes: number[] = [];
  const simple: Record<string, number> = { n: 10, t: 9, '"': 34, '\\': 92, a: 7, b: 8, f: 12, r: 13, v: 11 };
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c !== '\\') {
      bytes.push(...Buffer.from(c, 'utf8'));
      continue;
    }
    const next = body[i + 1] ?? '';
    if (/[0-7]/.test(next)) {
      bytes.push(parseInt(body.slice(i + 1, i + 4), 8));
      i += 3;
    } else {
      bytes.push(simple[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

function headerPath(rest: string, prefix: 'a/' | 'b/'): string | null {
  // A tab separates an optional timestamp (diff -u); git never writes one.
  const raw = unquote(rest.split('\t', 1)[0]!.trimEnd());
  if (raw === '/dev/null') return null;
  return raw.startsWith(prefix) ? raw.slice(prefix.length) : raw;
}

/**
 * Files in a unified diff, from its `---`/`+++` headers. Hunk bodies are skipped by their line
 * counts, so a removed line that itself starts with `-- ` is never taken for a header.
 */
export function diffFiles(patch: string): DiffFile[] {
  const lines = patch.split('\n');
  const files: DiffFile[] = [];
  let oldLeft = 0;
  let newLeft = 0;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (oldLeft > 0 || newLeft > 0) {
      if (line.startsWith('\\')) continue; // "\ No newline at end of file"
      const c = line[0] ?? ' ';
      if (c === '-') oldLeft--;
      else if (c === '+') newLeft--;
      else {
        oldLeft--;
        newLeft--;
      }
      continue;
    }
    const hunk = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line);
    if (hunk) {
      oldLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      newLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      continue;
    }
    if (line.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ')) {
      files.push({ oldPath: headerPath(line.slice(4), 'a/'), newPath: headerPath(lines[i + 1]!.slice(4), 'b/') });
      i++;
    }
  }
  return files;
}

/** Files that exist at the base commit and that the patch changes: what `git checkout <base> -- ...` may reset. */
export function modifiedFiles(patch: string): string[] {
  return unique(diffFiles(patch).flatMap((f) => (f.oldPath === null ? [] : [f.oldPath])));
}

/** Extensions the harness never passes to a test runner (its list, "csv" without a dot included). */
export const NON_TEST_EXTS = ['.json', '.png', 'csv', '.txt', '.md', '.jpg', '.jpeg', '.pkl', '.yml', '.yaml', '.toml'];

export type DirectiveStyle = 'none' | 'files' | 'django';

/**
 * Test directives the harness appends to the test command: every `b/` path of a `diff --git`
 * header that is not data; Django wants dotted module names relative to tests/.
 */
export function testDirectives(testPatch: string, style: DirectiveStyle): string[] {
  if (style === 'none') return [];
  const found: string[] = [];
  for (const m of testPatch.matchAll(/^diff --git a\/.* b\/(.*)$/gm)) found.push(m[1]!);
  const tests = found.filter((d) => !NON_TEST_EXTS.some((ext) => d.endsWith(ext)));
  if (style === 'files') return tests;
  return tests.map((d) => {
    let s = d.endsWith('.py') ? d.slice(0, -3) : d;
    if (s.startsWith('tests/')) s = s.slice('tests/'.length);
    return s.replaceAll('/', '.');
  });
}

function unique(xs: string[]): string[] {
  return [...new Set(xs)];
}

const HEADER_LINE = /^(diff |--- |\+\+\+ |\*\*\* |Index: |rename from |rename to |copy from |copy to )/;
const GIT_DIR_COMPONENT = /(^|[\s/"])\.git(\/|\s|"|$)/i;

/**
 * The first header-like line naming a path inside `.git`, or null. git apply refuses such patches
 * but the harness's `patch` fallback writes them (hooks, config with filter drivers or fsmonitor),
 * which would let a patch run code before the tests and forge the log. Deliberately wider than any
 * one diff dialect's headers: a hunk line that merely looks like a header can only cause a refusal.
 */
export function gitDirWrite(patch: string): string | null {
  for (const line of patch.split('\n')) {
    if (HEADER_LINE.test(line) && GIT_DIR_COMPONENT.test(line.replace(HEADER_LINE, ''))) return line;
  }
  return null;
}
