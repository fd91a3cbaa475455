/**
 * `serve --token-file F` trusts F as ssh trusts a key: a symlink, a file of another user, one that
 * group or others may read or write, a FIFO, or one in a directory others may write is refused
 * (exit 2, naming the file and the fix) and nothing is followed or written; a missing file is made
 * 0600 without following a link planted in its place; the default `<store>/serve.token` is made on
 * the first start and kept, and a symlink planted there is refused rather than written through.
 */
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadToken } from './token-file.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');
const work = mkdtempSync(join(tmpdir(), 'ms-token-'));
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

const TOKEN = 'a-long-enough-token-0123456789';
let n = 0;
/** A fresh directory of ours (0700) for one case. */
function dir(): string {
  const d = join(work, `case-${n++}`);
  mkdirSync(d, { mode: 0o700 });
  return d;
}
function tokenFile(mode = 0o600): string {
  const f = join(dir(), 'token');
  writeFileSync(f, `${TOKEN}\n`, { mode });
  chmodSync(f, mode);
  return f;
}

describe('the token file', () => {
  it('is read when it is a 0600 file of ours, and made 0600 when it is missing', () => {
    expect(loadToken(tokenFile(), work).token).toBe(TOKEN);
    const missing = join(dir(), 'sub', 'token');
    const made = loadToken(missing, work);
    expect(made.file).toBe(missing);
    expect(lstatSync(missing).mode & 0o7777).toBe(0o600);
    expect(readFileSync(missing, 'utf8').trim()).toBe(made.token);
    // in a sticky directory others may write (as /tmp), a file of ours is still ours alone
    const sticky = dir();
    chmodSync(sticky, 0o1777);
    expect(loadToken(join(sticky, 'token'), work).token).toMatch(/^[0-9a-f]{64}$/);
  });

  it('is refused as a symlink, even to a good file, and a planted dangling link is not followed', () => {
    const good = tokenFile();
    const link = join(dir(), 'token');
    symlinkSync(good, link);
    expect(() => loadToken(link, work)).toThrow(/token file .*token is a symlink/);
    const d = dir();
    const target = join(d, 'where-the-link-points');
    symlinkSync(target, join(d, 'token'));
    expect(() => loadToken(join(d, 'token'), work)).toThrow(/is a symlink/);
    expect(existsSync(target)).toBe(false);
  });

  it('is refused when another user owns it, or group or others may read or write it, saying what to run', () => {
    const theirs = tokenFile();
    chownSync(theirs, 65534, 65534);
    expect(() => loadToken(theirs, work)).toThrow(/belongs to uid 65534, not to the server's user/);
    for (const mode of [0o644, 0o640, 0o620, 0o602]) {
      const f = tokenFile(mode);
      let err: unknown;
      try {
        loadToken(f, work);
      } catch (e) {
        err = e;
      }
      expect(err, mode.toString(8)).toMatchObject({
        code: 'INVALID_INPUT',
        message: expect.stringContaining(`mode ${mode.toString(8)}`),
        hint: `\`chmod 600 ${f}\``,
      });
    }
  });

  it('is refused when it is a FIFO (without blocking) or sits in a directory others may write', () => {
    const d = dir();
    execFileSync('mkfifo', ['-m', '600', join(d, 'token')]);
    expect(() => loadToken(join(d, 'token'), work)).toThrow(/is not a regular file/);
    const open = dir();
    chmodSync(open, 0o777);
    expect(() => loadToken(join(open, 'token'), work)).toThrow(/which others may write \(mode 777\)/);
    expect(existsSync(join(open, 'token'))).toBe(false);
    const theirs = dir();
    chownSync(theirs, 65534, 65534);
    expect(() => loadToken(join(theirs, 'token'), work)).toThrow(/which belongs to uid 65534/);
  });

  it('by default is made once in the store and kept; a symlink planted there is refused, not written through', () => {
    const store = dir();
    const first = loadToken(undefined, store);
    expect(first.file).toBe(join(store, 'serve.token'));
    expect(lstatSync(first.file!).mode & 0o7777).toBe(0o600);
    expect(loadToken(undefined, store)).toEqual(first); // a restarted node keeps its clients
    const target = join(dir(), 'elsewhere');
    writeFileSync(target, 'not yours\n');
    rmSync(first.file!);
    symlinkSync(target, first.file!);
    expect(() => loadToken(undefined, store)).toThrow(/is a symlink/);
    expect(readFileSync(target, 'utf8')).toBe('not yours\n');
  });

  it('stops `serve` with exit 2 before it listens', async () => {
    const f = tokenFile(0o644);
    const p = spawn(BIN, ['--registry', join(work, 'reg'), '--store', join(work, 'store'), 'serve', '--listen', '127.0.0.1:0', '--token-file', f], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    // a serve that trusted the file would listen and print where: it is stopped then, not waited for
    p.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('listening')) p.kill('SIGKILL');
    });
    p.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
    expect(code, err).toBe(2);
    expect(err).toContain(`chmod 600 ${f}`);
    expect(out).not.toContain('listening');
  });
});
