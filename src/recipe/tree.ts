/**
 * Content digest of a file or directory tree on the host, for cache keys of recipes that copy
 * local content in (env `files`, directory bases, tarballs). Streams file contents; walks in
 * canonical byte-wise order so the digest does not depend on readdir order.
 */
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { type Digest, sha256File } from '../cas/digest.js';
import { NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';

export interface TreeDigestOptions {
  /** Include uid/gid (a rootfs directory keeps its owners; files copied in become root's). */
  owners: boolean;
}

/** One line per entry: `<type> <mode> <uid:gid|-> <json path> <content digest | link target | rdev>`. */
export async function treeDigest(root: string, opts: TreeDigestOptions): Promise<Digest> {
  const h = createHash('sha256');
  try {
    await walk(root, '.', opts, (line) => h.update(`${line}\n`));
  } catch (e) {
    if (isErrno(e, 'ENOENT'))
      throw new NotFoundError(`${root}`, 'a recipe names a local file or directory that does not exist; fix the path (relative to the recipe file)');
    throw e;
  }
  return `sha256:${h.digest('hex')}`;
}

async function walk(abs: string, rel: string, opts: TreeDigestOptions, emit: (line: string) => void): Promise<void> {
  const st = await lstat(abs);
  const mode = (st.mode & 0o7777).toString(8);
  const owner = opts.owners ? `${st.uid}:${st.gid}` : '-';
  const head = (type: string): string => `${type} ${mode} ${owner} ${JSON.stringify(rel)}`;
  if (st.isFile()) {
    emit(`${head('f')} ${(await sha256File(abs)).digest}`);
  } else if (st.isSymbolicLink()) {
    emit(`${head('l')} ${JSON.stringify(await readlink(abs))}`);
  } else if (st.isDirectory()) {
    emit(head('d'));
    // Non-UTF-8 names are rare in recipe inputs; they digest by their lossy string form.
    const names = (await readdir(abs)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    for (const n of names) await walk(join(abs, n), rel === '.' ? n : `${rel}/${n}`, opts, emit);
  } else {
    const type = st.isFIFO() ? 'p' : st.isCharacterDevice() ? 'c' : st.isBlockDevice() ? 'b' : 's';
    emit(`${head(type)} ${st.rdev}`);
  }
}
