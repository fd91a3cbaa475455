/**
 * Where each member of an uncompressed tar archive file lies (oci-archive, docker-archive), found
 * by reading only the headers and seeking over the bodies, so a multi-GB archive is never
 * extracted: a blob is then read as a byte range of the archive itself.
 */
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { posix } from 'node:path';
import { InvalidInputError, NotFoundError } from '../errors.js';

export interface Member {
  offset: number;
  size: number;
}

export class ArchiveIndex {
  private constructor(
    readonly file: string,
    private readonly members: Map<string, Member>,
    private readonly links: Map<string, string>,
  ) {}

  static async open(file: string): Promise<ArchiveIndex> {
    const fh = await open(file, 'r').catch((e: unknown) => {
      throw new NotFoundError(`archive ${file} (${(e as Error).message})`, 'give the path of an image archive (podman save / docker save)');
    });
    const members = new Map<string, Member>();
    const links = new Map<string, string>();
    try {
      const h = Buffer.alloc(512);
      let off = 0;
      let longName: string | null = null;
      let paxPath: string | null = null;
      let paxLink: string | null = null;
      for (;;) {
        const { bytesRead } = await fh.read(h, 0, 512, off);
        if (bytesRead < 512 || h.every((b) => b === 0)) break;
        const size = Number.parseInt(h.subarray(124, 136).toString('latin1').replace(/\0.*$/s, '').trim() || '0', 8);
        if (!Number.isSafeInteger(size))
          throw new InvalidInputError(`${file}: not an uncompressed tar archive`, 'image archives are plain tar files (podman save)');
        const flag = String.fromCharCode(h[156]!);
        const body = off + 512;
        const padded = Math.ceil(size / 512) * 512;
        if (flag === 'L' || flag === 'x') {
          const b = Buffer.alloc(Math.min(size, 1 << 20));
          await fh.read(b, 0, b.length, body);
          if (flag === 'L') longName = b.toString('utf8').replace(/\0.*$/s, '');
          else {
            for (const m of b.toString('utf8').matchAll(/\d+ (path|linkpath)=([^\n]*)\n/g)) {
              if (m[1] === 'path') paxPath = m[2]!;
              else paxLink = m[2]!;
            }
          }
          off = body + padded;
          continue;
        }
        let name = longName ?? paxPath ?? h.subarray(0, 100).toString('utf8').replace(/\0.*$/s, '');
        if (longName === null && paxPath === null && h.subarray(257, 262).toString('latin1') === 'ustar' && h[345] !== 0) {
          name = `${h.subarray(345, 500).toString('utf8').replace(/\0.*$/s, '')}/${name}`;
        }
        const link = paxLink ?? h.subarray(157, 257).toString('utf8').replace(/\0.*$/s, '');
        longName = paxPath = paxLink = null;
        const key = posix
          .normalize(name)
          .replace(/^(\.\/)+/, '')
          .replace(/\/$/, '');
        if (flag === '0' || flag === '\0' || flag === '7') members.set(key, { offset: body, size });
        else if (flag === '2') links.set(key, posix.normalize(posix.join(posix.dirname(key), link)));
        else if (flag === '1') links.set(key, posix.normalize(link).replace(/^(\.\/)+/, ''));
        off = body + padded;
      }
    } finally {
      await fh.close();
    }
    return new ArchiveIndex(file, members, links);
  }

  /** A member by name, following links within the archive (docker-archive's `layer.tar` links). */
  get(name: string): Member | undefined {
    let key = posix.normalize(name).replace(/^(\.\/)+/, '');
    for (let i = 0; i < 16; i++) {
      const m = this.members.get(key);
      if (m !== undefined) return m;
      const l = this.links.get(key);
      if (l === undefined) return undefined;
      key = l;
    }
    return undefined;
  }

  need(name: string): Member {
    const m = this.get(name);
    if (m === undefined) throw new NotFoundError(`${name} in archive ${this.file}`, 'the archive is incomplete or not an image archive');
    return m;
  }

  async read(name: string, limit = 16 << 20): Promise<Buffer> {
    const m = this.need(name);
    if (m.size > limit) throw new InvalidInputError(`${name} in ${this.file} is ${m.size} bytes, more than a metadata file may be`);
    const fh = await open(this.file, 'r');
    try {
      const b = Buffer.alloc(m.size);
      await fh.read(b, 0, m.size, m.offset);
      return b;
    } finally {
      await fh.close();
    }
  }

  stream(name: string): AsyncIterable<Buffer> {
    const m = this.need(name);
    if (m.size === 0) return (async function* () {})();
    return createReadStream(this.file, { start: m.offset, end: m.offset + m.size - 1, highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>;
  }
}
