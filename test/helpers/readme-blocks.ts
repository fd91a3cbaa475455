/**
 * The fenced code blocks of a Markdown file, for the test that runs every one of them (so that a
 * README example can never rot). A block preceded by `<!-- readme-test: skip: REASON -->` is
 * listed with its reason instead of being run; nothing else may opt out.
 */
import { readFileSync } from 'node:fs';

export interface CodeBlock {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  code: string;
  /** Why the test does not run it, when the file says so. */
  skip?: string;
}

const SKIP = /^<!--\s*readme-test:\s*skip:\s*(.+?)\s*-->$/;

export function codeBlocks(file: string): CodeBlock[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  const out: CodeBlock[] = [];
  let skip: string | undefined;
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]!;
    const marker = SKIP.exec(l.trim());
    if (marker !== null) {
      skip = marker[1];
      continue;
    }
    const open = /^```(\S*)\s*$/.exec(l);
    if (open === null) {
      if (l.trim() !== '') skip = undefined;
      continue;
    }
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    if (i >= lines.length) throw new Error(`${file}:${start + 1}: a code block that is never closed`);
    out.push({ file, line: start + 1, lang: open[1] ?? '', code: `${body.join('\n')}\n`, ...(skip === undefined ? {} : { skip }) });
    skip = undefined;
  }
  return out;
}
