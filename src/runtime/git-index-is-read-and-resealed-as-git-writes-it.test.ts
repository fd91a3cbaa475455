/**
 * The git index reader and patcher against indexes real git wrote: versions 2, 3 (an extended
 * flag) and 4 (prefix-compressed paths), sha1 and sha256 repositories; a patched, resealed index
 * is read by git with the new stat data; anything malformed is refused, never read past its end.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { rng } from '../../test/helpers/rng.js';
import { parseGitIndex, resealIndex, setEntryStat } from './git-index.js';

const work = mkdtempSync(join(tmpdir(), 'ms-git-index-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const ENV = { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' };
const git = (repo: string, ...args: string[]): string => execFileSync('git', ['-C', repo, ...args], { env: ENV, encoding: 'utf8' });

function repo(name: string, init: string[] = []): string {
  const dir = join(work, name);
  execFileSync('git', ['init', '-q', ...init, dir], { env: ENV });
  for (const p of ['a.txt', 'src/deep/er/b.py', 'src/deep/er/c.py', 'src/deep/d.py', 'z/long-name-that-shares-no-prefix.txt']) {
    mkdirSync(join(dir, p, '..'), { recursive: true });
    writeFileSync(join(dir, p), `content of ${p}\n`);
  }
  git(dir, 'add', '-A');
  return dir;
}

/** `git ls-files --debug`: path -> its stat fields as git holds them. */
function debug(dir: string): Map<string, { ctime: string; mtime: string; ino: string; uid: string; size: string }> {
  const out = new Map<string, { ctime: string; mtime: string; ino: string; uid: string; size: string }>();
  const blocks = git(dir, 'ls-files', '--debug').split(/\n(?=\S)/);
  for (const b of blocks) {
    const [path, ...rest] = b.trim().split('\n');
    const t = rest.join(' ');
    out.set(path!, {
      ctime: /ctime: (\S+)/.exec(t)![1]!,
      mtime: /mtime: (\S+)/.exec(t)![1]!,
      ino: /ino: (\d+)/.exec(t)![1]!,
      uid: /uid: (\d+)/.exec(t)![1]!,
      size: /size: (\d+)/.exec(t)![1]!,
    });
  }
  return out;
}

describe('git index', () => {
  const cases: Array<[string, number, () => string]> = [
    ['version 2', 2, () => repo('v2')],
    [
      'version 3 with an extended flag',
      3,
      () => {
        const d = repo('v3');
        git(d, 'update-index', '--skip-worktree', 'src/deep/d.py');
        return d;
      },
    ],
    [
      'version 4',
      4,
      () => {
        const d = repo('v4');
        git(d, 'update-index', '--index-version', '4');
        return d;
      },
    ],
    ['a sha256 repository', 2, () => repo('sha256', ['--object-format=sha256'])],
  ];
  for (const [label, version, make] of cases) {
    it(`reads ${label} as git does, and git reads the patched, resealed index`, () => {
      const dir = make();
      const file = join(dir, '.git', 'index');
      const buf = readFileSync(file);
      expect(buf.readUInt32BE(4)).toBe(version);
      const parsed = parseGitIndex(buf);
      expect(parsed).toBeDefined();
      const before = debug(dir);
      expect(parsed!.entries.map((e) => e.path)).toEqual([...before.keys()]);
      for (const e of parsed!.entries) {
        const d = before.get(e.path)!;
        expect([e.path, `${e.mtimeSec}:${e.mtimeNsec}`, String(e.size)]).toEqual([e.path, d.mtime, d.size]);
        expect(e.mode).toBe(0o100644);
      }
      const patched = Buffer.from(buf);
      parsed!.entries.forEach((e, i) =>
        setEntryStat(patched, e.offset, { ctimeNs: 1_700_000_000_000_000_123n + BigInt(i), ino: 4242n + BigInt(i), uid: 7, gid: 8 }),
      );
      resealIndex(patched, parsed!);
      writeFileSync(file, patched);
      const after = debug(dir); // git verifies the checksum on every read
      [...after.values()].forEach((d, i) => expect(d).toMatchObject({ ctime: `1700000000:${123 + i}`, ino: String(4242 + i), uid: '7' }));
      expect(git(dir, 'status', '--porcelain')).toContain('A  a.txt');
    });
  }

  it('refuses truncated, corrupted and random indexes without reading past their end', () => {
    const buf = readFileSync(join(repo('bad'), '.git', 'index'));
    expect(parseGitIndex(buf)).toBeDefined();
    for (let n = 0; n < buf.length; n += 7) expect(parseGitIndex(buf.subarray(0, n))).toBeUndefined();
    const flipped = Buffer.from(buf);
    flipped[40] = flipped[40]! ^ 1;
    expect(parseGitIndex(flipped)).toBeUndefined(); // checksum
    const r = rng(7);
    for (let i = 0; i < 200; i++) {
      const junk = Buffer.from(Array.from({ length: 12 + Math.floor(r() * 400) }, () => Math.floor(r() * 256)));
      junk.write('DIRC', 0, 'latin1');
      junk.writeUInt32BE(2 + (i % 3), 4);
      expect(parseGitIndex(junk)).toBeUndefined();
    }
  });
});
