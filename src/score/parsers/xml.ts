/**
 * A small XML element reader for the reports test runners write into their logs (doctest, Catch2,
 * JUnit XML). It keeps elements and attributes only (text is never graded), decodes entities,
 * skips comments, CDATA, processing instructions and doctypes, and walks with an explicit stack so
 * a deeply nested document cannot overflow the call stack. Anything malformed is an XmlError: a
 * report cut off or interleaved with other output yields no results, as the harness's strict
 * parser yields none.
 */

export interface XmlElement {
  name: string;
  attrs: Readonly<Record<string, string>>;
  children: XmlElement[];
}

export class XmlError extends Error {}

const NAME = /[A-Za-z_:][-A-Za-z0-9_:.]*/y;
const ATTR = /\s*([A-Za-z_:][-A-Za-z0-9_:.]*)\s*=\s*(?:"([^"]*)"|'([^']*)')/y;
const ENTITIES: Readonly<Record<string, string>> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

function decode(raw: string): string {
  return raw.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);/g, (whole, ref: string) => {
    if (ref.startsWith('#x')) return String.fromCodePoint(Number.parseInt(ref.slice(2), 16));
    if (ref.startsWith('#')) return String.fromCodePoint(Number.parseInt(ref.slice(1), 10));
    const e = ENTITIES[ref];
    if (e === undefined) throw new XmlError(`unknown entity ${whole}`);
    return e;
  });
}

/** Reads `<name attr="v" ...>` or `<name .../>` at `at` (which points at `<`). */
function readStartTag(src: string, at: number): { element: XmlElement; selfClosing: boolean; end: number } {
  NAME.lastIndex = at + 1;
  const name = NAME.exec(src);
  if (name === null) throw new XmlError(`expected an element name at ${at}`);
  let i = NAME.lastIndex;
  const attrs: Record<string, string> = {};
  for (;;) {
    ATTR.lastIndex = i;
    const a = ATTR.exec(src);
    if (a === null) break;
    attrs[a[1]!] = decode(a[2] ?? a[3] ?? '');
    i = ATTR.lastIndex;
  }
  while (/\s/.test(src[i] ?? '')) i++;
  if (src.startsWith('/>', i)) return { element: { name: name[0], attrs, children: [] }, selfClosing: true, end: i + 2 };
  if (src[i] === '>') return { element: { name: name[0], attrs, children: [] }, selfClosing: false, end: i + 1 };
  throw new XmlError(`malformed start tag <${name[0]} at ${at}`);
}

function skipPast(src: string, from: number, token: string): number {
  const at = src.indexOf(token, from);
  if (at === -1) throw new XmlError(`unterminated markup: no ${token}`);
  return at + token.length;
}

/** The element that starts at `at` (a `<`), and the offset just past its end tag. */
export function readElement(src: string, at: number): { element: XmlElement; end: number } {
  const first = readStartTag(src, at);
  if (first.selfClosing) return { element: first.element, end: first.end };
  const stack: XmlElement[] = [first.element];
  let i = first.end;
  while (stack.length > 0) {
    const lt = src.indexOf('<', i);
    if (lt === -1) throw new XmlError(`<${stack.at(-1)!.name}> is never closed`);
    if (src.startsWith('<!--', lt)) i = skipPast(src, lt + 4, '-->');
    else if (src.startsWith('<![CDATA[', lt)) i = skipPast(src, lt + 9, ']]>');
    else if (src.startsWith('<?', lt) || src.startsWith('<!', lt)) i = skipPast(src, lt + 2, '>');
    else if (src.startsWith('</', lt)) {
      NAME.lastIndex = lt + 2;
      const name = NAME.exec(src);
      const open = stack.pop()!;
      if (name === null || name[0] !== open.name) throw new XmlError(`</${name?.[0] ?? ''}> closes <${open.name}>`);
      i = skipPast(src, NAME.lastIndex, '>');
    } else {
      const child = readStartTag(src, lt);
      stack.at(-1)!.children.push(child.element);
      if (!child.selfClosing) stack.push(child.element);
      i = child.end;
    }
  }
  return { element: first.element, end: i };
}

/**
 * Every well-formed top-level document rooted at one of `roots` in a log, in order: text between
 * them (the rest of the log) is passed over, and a root that does not parse is skipped.
 */
export function documentsIn(log: string, roots: readonly string[]): XmlElement[] {
  const opener = new RegExp(`<(?:${roots.map((r) => r.replace(/[.:-]/g, '\\$&')).join('|')})(?=[\\s/>])`, 'g');
  const docs: XmlElement[] = [];
  let m: RegExpExecArray | null;
  while ((m = opener.exec(log)) !== null) {
    try {
      const { element, end } = readElement(log, m.index);
      docs.push(element);
      opener.lastIndex = end;
    } catch (e) {
      if (!(e instanceof XmlError)) throw e;
    }
  }
  return docs;
}

/** Every element named `name` below `el`, in document order (ElementTree's `.//name`). */
export function descendants(el: XmlElement, name: string): XmlElement[] {
  const out: XmlElement[] = [];
  const todo = [...el.children].reverse();
  while (todo.length > 0) {
    const e = todo.pop()!;
    if (e.name === name) out.push(e);
    for (let k = e.children.length - 1; k >= 0; k--) todo.push(e.children[k]!);
  }
  return out;
}
