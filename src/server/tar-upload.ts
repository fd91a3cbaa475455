/**
 * The checks an uploaded tar passes on its way into the sandbox: each entry's name (and a hard
 * link's target) stays below the target directory (no absolute names, no `..`), no entry goes
 * through a symlink the same archive made, only files, directories and links, and the body stays
 * under the size limit. The archive is re-packed entry by entry as it streams (the environment's
 * own tar extracts it), so a tar whose extractor would follow `../` never sees such an entry; and
 * it is spooled whole before extraction starts, so a refused entry anywhere, or a body that breaks
 * off, leaves nothing of the archive in the sandbox.
 */
import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type Header, extract, pack } from 'tar-stream';
import { MinisandboxError } from '../errors.js';

export class UnsafeTarError extends MinisandboxError {
  constructor(message: string) {
    super('UNSAFE_PATH', message, { hint: 'entries must be relative names below the target directory, without `..`, not through a symlink of the archive' });
  }
}

export class TarTooLargeError extends MinisandboxError {
  constructor(limit: number) {
    super('BODY_TOO_LARGE', `the tar body is larger than ${limit} bytes`, { hint: 'upload in parts (several tars), or raise the server limit' });
  }
}

const TYPES = new Set(['file', 'contiguous-file', 'directory', 'symlink', 'link']);

/** `./a/b/` -> `a/b`; undefined where the name is not a path below the root. */
function relativeName(name: string): string | undefined {
  if (name.startsWith('/') || name.includes('\0')) return undefined;
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return undefined;
  return parts.join('/');
}

function underLink(name: string, links: Set<string>): string | undefined {
  const parts = name.split('/');
  for (let i = 1; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    if (links.has(prefix)) return prefix;
  }
  return undefined;
}

/** `src` re-packed with every entry checked; `failure()` says why it stopped, if it did. */
export function checkedTar(src: Readable, maxBytes: number): { out: Readable; failure: () => MinisandboxError | undefined } {
  const ex = extract();
  const out = pack();
  const links = new Set<string>();
  let failed: MinisandboxError | undefined;
  const fail = (e: MinisandboxError): void => {
    failed ??= e;
    src.unpipe(ex);
    src.resume(); // drained, so the client gets its answer
    ex.destroy();
    out.destroy(e);
  };
  // its error reaches the command's stdin (which kills the command); why is in failure()
  out.on('error', () => undefined);
  let seen = 0;
  src.on('data', (c: Buffer) => {
    seen += c.length;
    if (seen > maxBytes) fail(new TarTooLargeError(maxBytes));
  });
  src.on('error', (e) => fail(new MinisandboxError('TRUNCATED_BODY', `the upload broke off: ${e.message}`, { hint: 'send the tar again' })));
  ex.on('error', (e) =>
    fail(new MinisandboxError('INVALID_INPUT', `the body is not a valid tar: ${e.message}`, { hint: 'send a tar (ustar, GNU or pax), uncompressed' })),
  );
  ex.on('entry', (h, body, next) => {
    const type = h.type ?? 'file';
    const name = relativeName(h.name);
    if (!TYPES.has(type)) return fail(new UnsafeTarError(`tar entry ${JSON.stringify(h.name)} is a ${type}: only files, directories and links are extracted`));
    if (name === undefined) return fail(new UnsafeTarError(`tar entry ${JSON.stringify(h.name)} leaves the target directory`));
    const through = underLink(name, links);
    if (through !== undefined) return fail(new UnsafeTarError(`tar entry ${JSON.stringify(h.name)} goes through the archive's symlink ${through}`));
    let linkname: string | undefined;
    if (type === 'link') {
      linkname = relativeName(h.linkname ?? '');
      if (linkname === undefined || linkname === '' || underLink(linkname, links) !== undefined)
        return fail(new UnsafeTarError(`tar hard link ${JSON.stringify(h.name)} -> ${JSON.stringify(h.linkname)} leaves the target directory`));
    }
    if (type === 'symlink') linkname = h.linkname ?? '';
    if (name === '') {
      // the target directory itself
      body.on('end', next);
      body.resume();
      return;
    }
    if (type === 'symlink') links.add(name);
    const header: Partial<Header> & { name: string } = {
      name,
      type: type === 'contiguous-file' ? 'file' : type,
      mode: (h.mode ?? (type === 'directory' ? 0o755 : 0o644)) & 0o7777,
      ...(h.mtime === undefined ? {} : { mtime: h.mtime }),
      ...(type === 'file' || type === 'contiguous-file' ? { size: h.size ?? 0 } : {}),
      ...(linkname === undefined ? {} : { linkname }),
    };
    // a failure destroys the pack, and with it the entry being copied: why is in `failed`
    body.on('error', () => undefined);
    if (header.type === 'file') {
      const sink = out.entry(header, (e) => (e ? undefined : next()));
      sink.on('error', () => undefined);
      body.pipe(sink);
    } else {
      let ended = false;
      let written = false;
      const both = (): void => {
        if (ended && written) next();
      };
      out.entry(header, () => {
        written = true;
        both();
      });
      body.on('end', () => {
        ended = true;
        both();
      });
      body.resume();
    }
  });
  ex.on('finish', () => {
    if (failed === undefined) out.finalize();
  });
  src.pipe(ex);
  // a node stream for the command's stdin; the pack's backpressure goes through its iterator
  return { out: Readable.from(out), failure: () => failed };
}

/**
 * The checked archive written whole to `file` (under the size limit, which it counts) before any
 * of it reaches the sandbox; rejects with the reason the archive was refused.
 */
export async function spoolCheckedTar(src: Readable, maxBytes: number, file: string, signal?: AbortSignal): Promise<void> {
  const checked = checkedTar(src, maxBytes);
  // a client gone mid-upload never ends its body: the spool would wait for it forever
  const onAbort = (): void => void src.destroy(new Error('the client went away'));
  if (signal?.aborted === true) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await pipeline(checked.out, createWriteStream(file, { mode: 0o600 }));
  } catch (e) {
    throw (
      checked.failure() ?? new MinisandboxError('TRUNCATED_BODY', `the upload could not be spooled: ${(e as Error).message}`, { hint: 'send the tar again' })
    );
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  const failure = checked.failure();
  if (failure !== undefined) throw failure;
}
