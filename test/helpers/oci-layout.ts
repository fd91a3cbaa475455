/** Hand-made layer tars and OCI image layouts (no container tools), for tests of odd and hostile images. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import tar, { type Header } from 'tar-stream';
import { sha256 } from '../../src/cas/digest.js';

export type TarItem = {
  name: string;
  type?: 'file' | 'directory' | 'link' | 'symlink';
  data?: string;
  linkname?: string;
  mode?: number;
  pax?: Record<string, string>;
  mtime?: Date;
};

/** An entry for tarOf: any tar-stream header (devices, odd modes, hostile names) and a file's text. */
export type RawTarEntry = Partial<Header> & { name: string; data?: string };

/** A tar of the headers as given (nothing defaulted beyond tar-stream's own), for upload tests. */
export async function tarOf(entries: RawTarEntry[]): Promise<Buffer> {
  const p = tar.pack();
  for (const { data, ...h } of entries) {
    if (data === undefined) p.entry(h);
    else p.entry(h, data);
  }
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const c of p) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function makeTar(items: TarItem[]): Promise<Buffer> {
  const p = tar.pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((r) => p.on('end', () => r()));
  for (const it of items) {
    const type = it.type ?? 'file';
    const header = {
      name: it.name,
      type,
      mode: it.mode ?? (type === 'directory' ? 0o755 : 0o644),
      uid: 0,
      gid: 0,
      mtime: it.mtime ?? new Date(1_700_000_000_000),
      ...(it.linkname === undefined ? {} : { linkname: it.linkname }),
      ...(it.pax === undefined ? {} : { pax: it.pax }),
    };
    await new Promise<void>((res, rej) => {
      const cb = (e?: Error | null): void => (e ? rej(e) : res());
      if (type === 'file') p.entry(header, it.data ?? '', cb);
      else p.entry(header, cb);
    });
  }
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

export interface LayoutImage {
  /** index.json's `org.opencontainers.image.ref.name`; omitted: an untagged entry. */
  tag?: string;
  /** Blobs as stored (compressed or not) and the tars they hold (for the diff ids). */
  layers: Array<{ blob: Buffer; tar: Buffer }>;
  config?: Record<string, unknown>;
}

/** Writes (or adds to) an OCI layout holding these images. */
export function writeLayout(dir: string, images: LayoutImage[]): void {
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
  const put = (b: Buffer): string => {
    const d = sha256(b);
    writeFileSync(join(dir, 'blobs', 'sha256', d.slice(7)), b);
    return d;
  };
  const manifests = images.map((img) => {
    const config = Buffer.from(
      JSON.stringify({
        architecture: 'amd64',
        os: 'linux',
        config: img.config ?? {},
        rootfs: { type: 'layers', diff_ids: img.layers.map((l) => sha256(l.tar)) },
      }),
    );
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: put(config), size: config.length },
        layers: img.layers.map((l) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: put(l.blob), size: l.blob.length })),
      }),
    );
    return {
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: put(manifest),
      size: manifest.length,
      ...(img.tag === undefined ? {} : { annotations: { 'org.opencontainers.image.ref.name': img.tag } }),
    };
  });
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests }));
}
