/**
 * A tarball tar cannot extract fails `import` with one line (tar's first complaint) and the path
 * of a log holding the rest: a tar failing on 10,000 entries made a 16 MiB error message.
 */
import { execFile } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { pack } from 'tar-stream';
import { afterAll, describe, expect, it } from 'vitest';

const work = mkdtempSync(join(tmpdir(), 'msb-tarerr-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('import of a tarball tar cannot extract', () => {
  it("fails with exit 2, one line naming tar's first error and a log of all of them, and leaves no extraction", async () => {
    // a file `f`, then 10,000 entries beneath it: each fails with "Not a directory"
    const tarball = join(work, 'bad.tar');
    const p = pack();
    const out = pipeline(p, createWriteStream(tarball));
    p.entry({ name: 'f', type: 'file' }, 'x');
    for (let i = 0; i < 10_000; i++) p.entry({ name: `f/d${i}`, type: 'directory' });
    p.finalize();
    await out;
    const store = join(work, 'store');
    const cli = resolve(import.meta.dirname, '..', '..', 'bin/minisandbox');
    const r = await promisify(execFile)(cli, ['--registry', join(work, 'reg'), '--store', store, 'import', tarball, '--tag', 'bad/tar'], {
      maxBuffer: 64 << 20,
    }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code?: number; stderr?: string }) => ({ code: e.code, stderr: e.stderr ?? '' }),
    );
    expect(r.code).toBe(2);
    // progress goes to stderr as JSON lines when it is no terminal
    expect(r.stderr.length).toBeLessThan(2000);
    const lines = r.stderr
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('{'));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^error: cannot extract .*bad\.tar: tar: f\/d\d+: .*Not a directory$/);
    const log = /tar's whole error output is in (\S+)$/.exec(lines[1]!)?.[1];
    expect(log).toBeDefined();
    expect(
      readFileSync(log!, 'utf8')
        .split('\n')
        .filter((l) => l.includes('Not a directory')).length,
    ).toBeGreaterThanOrEqual(10_000);
    expect(existsSync(join(store, 'tmp')) ? readdirSync(join(store, 'tmp')).filter((n) => n.startsWith('import-')) : []).toEqual([]);
  }, 120_000);
});
