/**
 * `serve`'s token file, trusted only as ssh trusts a private key: whoever can read the token drives
 * the server (root's: every sandbox of the node), whoever can write it chooses the token, and a
 * symlink lets its owner point the server at another file. So the file must be a regular file, not
 * a symlink, owned by the server's user and neither readable nor writable by group or others; and
 * every directory above it must be owned by that user or root and not writable by group or others
 * (unless sticky, as /tmp: others there cannot rename or remove our file), since whoever can write
 * a directory can swap the file in it. Anything else stops the start (exit 2) with what to fix.
 *
 * A new token is written to a new file only: created 0600 with O_EXCL and O_NOFOLLOW (never through
 * a planted symlink, never into someone else's file); the default `<store>/serve.token` is made so
 * on the first start and then kept, read with the same checks (a symlink there is refused).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readFileSync, realpathSync, type Stats, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { InvalidInputError } from '../errors.js';
import { isErrno } from '../util/fs.js';

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_WRONLY } = constants;

/** A token file the server may not trust, with what to do about it. */
export class UnsafeTokenFileError extends InvalidInputError {
  constructor(file: string, why: string, fix: string) {
    super(`token file ${file} ${why}: anyone who can read it drives the server, and anyone who can write it picks the token`, fix);
  }
}

const octal = (mode: number): string => (mode & 0o7777).toString(8).padStart(3, '0');

function uid(): number {
  return process.geteuid?.() ?? 0;
}

/** The directory `dir` and each one above it: ours or root's, and writable by nobody else (unless sticky). */
function checkDirs(file: string, dir: string): void {
  const me = uid();
  let d: string;
  try {
    d = realpathSync(dir);
  } catch (e) {
    throw new UnsafeTokenFileError(file, `has no directory to live in (${String(e)})`, `create ${dir} first, mode 700`);
  }
  for (;;) {
    const st = lstatSync(d);
    if (st.uid !== me && st.uid !== 0)
      throw new UnsafeTokenFileError(
        file,
        `is in ${d}, which belongs to uid ${st.uid}`,
        `keep the token file in a directory of your own (uid ${me}) or root's`,
      );
    if ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0)
      throw new UnsafeTokenFileError(
        file,
        `is in ${d}, which others may write (mode ${octal(st.mode)})`,
        `\`chmod go-w ${d}\`, or keep the token file elsewhere`,
      );
    const up = dirname(d);
    if (up === d) return;
    d = up;
  }
}

function checkFile(file: string, st: Stats): void {
  const me = uid();
  if (!st.isFile())
    throw new UnsafeTokenFileError(file, 'is not a regular file', 'point --token-file at a regular file (or at a missing one, to have it made)');
  if (st.uid !== me) throw new UnsafeTokenFileError(file, `belongs to uid ${st.uid}, not to the server's user (uid ${me})`, `\`chown ${me} ${file}\``);
  if ((st.mode & 0o077) !== 0) throw new UnsafeTokenFileError(file, `is open to group or others (mode ${octal(st.mode)})`, `\`chmod 600 ${file}\``);
}

/** The token in an existing file, checked as above; undefined when the file does not exist. */
function readToken(file: string): string | undefined {
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO planted in its place is refused below instead of blocking the start
    fd = openSync(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return undefined;
    if (isErrno(e, 'ELOOP'))
      throw new UnsafeTokenFileError(file, 'is a symlink', `point --token-file at the file itself (\`readlink -f ${file}\`), not at a link to it`);
    throw new InvalidInputError(`cannot read token file ${file}: ${String(e)}`, 'check the path');
  }
  try {
    checkFile(file, fstatSync(fd));
    const token = readFileSync(fd, 'utf8').trim();
    if (token.length < 16)
      throw new InvalidInputError(
        `token file ${file} holds a token shorter than 16 characters`,
        'put a long random token in it (e.g. `openssl rand -hex 32`), or point --token-file at a missing file to have one made',
      );
    return token;
  } finally {
    closeSync(fd);
  }
}

/** Creates `file` (it must not exist) holding `token`, mode 0600; false if it appeared meanwhile. */
function createTokenFile(file: string, token: string): boolean {
  let fd: number;
  try {
    fd = openSync(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  } catch (e) {
    if (isErrno(e, 'EEXIST')) return false;
    throw new InvalidInputError(`cannot create token file ${file}: ${String(e)}`, 'check that its directory exists and is yours');
  }
  try {
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * The token: `--token-file`'s content, else `given` ($MINISANDBOX_TOKEN: a Kubernetes Secret's,
 * one for a cluster; no file then), else `<store>/serve.token`'s. A missing file gets a new random
 * token; an existing one is read (checked as above) and never rewritten, so a restarted node keeps
 * the token its clients have.
 */
export function loadToken(tokenFile: string | undefined, storeRoot: string, given?: string): { token: string; file: string | null } {
  if (tokenFile === undefined && given !== undefined) {
    if (given.trim().length < 16)
      throw new InvalidInputError('$MINISANDBOX_TOKEN is shorter than 16 characters', 'set it to a long random token, e.g. `openssl rand -hex 32`');
    return { token: given.trim(), file: null };
  }
  if (tokenFile === undefined) mkdirSync(storeRoot, { recursive: true, mode: 0o700 });
  const file = resolve(tokenFile ?? join(storeRoot, 'serve.token'));
  const dir = dirname(file);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  checkDirs(file, dir);
  const existing = readToken(file);
  if (existing !== undefined) return { token: existing, file };
  const token = randomBytes(32).toString('hex');
  if (createTokenFile(file, token)) return { token, file };
  // made by someone else between our two looks: trusted only as any existing file is
  const theirs = readToken(file);
  if (theirs === undefined) throw new InvalidInputError(`token file ${file} came and went while serve started`, 'start serve again');
  return { token: theirs, file };
}
