import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { binaryName } from './native.js';

describe("a native helper's name is remembered in a stamp until one of its files changes", () => {
  let dir: string;
  let where: { sources: string; builds: string[] };
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'msb-stamp-'));
    where = { sources: join(dir, 'src'), builds: [join(dir, 'build')] };
    mkdirSync(where.sources);
    writeFileSync(join(where.sources, 'h.c'), '#include "h-part.c"\nint main(void) { return part(); }\n');
    writeFileSync(join(where.sources, 'h-part.c'), 'static int part(void) { return 0; }\n');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the same name while nothing changes, from the stamp it wrote', () => {
    const first = binaryName('h', undefined, where);
    expect(first).toMatch(/^h-[0-9a-f]{12}$/);
    expect(readFileSync(join(where.builds[0]!, 'h.stamp'), 'utf8')).toContain(join(where.sources, 'h-part.c'));
    expect(binaryName('h', undefined, where)).toBe(first);
  });

  it('gives a new name when a part is edited, even to the same size and mtime', () => {
    const first = binaryName('h', undefined, where);
    const part = join(where.sources, 'h-part.c');
    const before = new Date(Date.now() - 60_000);
    utimesSync(part, before, before);
    const stamped = binaryName('h', undefined, where); // the stamp now records the older mtime
    expect(stamped).toBe(first);
    writeFileSync(part, 'static int part(void) { return 1; }\n'); // same length
    utimesSync(part, before, before); // and the mtime put back: the ctime still tells
    const edited = binaryName('h', undefined, where);
    expect(edited).not.toBe(first);
    // the name is the content's: putting the old text back gives the old name
    writeFileSync(part, 'static int part(void) { return 0; }\n');
    expect(binaryName('h', undefined, where)).toBe(first);
  });

  it('ignores a stamp that is corrupt or lists a file that is gone', () => {
    const first = binaryName('h', undefined, where);
    const stamp = join(where.builds[0]!, 'h.stamp');
    writeFileSync(stamp, 'not a tag\n');
    expect(binaryName('h', undefined, where)).toBe(first);
    writeFileSync(stamp, `abcdefabcdef\n-\n1:2:3:4\t${join(dir, 'gone.c')}\n`);
    expect(binaryName('h', undefined, where)).toBe(first);
  });

  it('names a helper with an optional part by that part and its settings too', () => {
    const feature = { name: 'frames', cflags: ['-DX'], libs: [], needs: 'nothing' };
    const withX = binaryName('h', feature, where);
    expect(withX).toMatch(/^h-frames-[0-9a-f]{12}$/);
    expect(withX.slice(-12)).not.toBe(binaryName('h', undefined, where).slice(-12));
    // same part name, other flags: the stamp of the first must not answer for the second
    const withY = binaryName('h', { ...feature, cflags: ['-DY'] }, where);
    expect(withY).not.toBe(withX);
    expect(binaryName('h', feature, where)).toBe(withX);
  });
});
