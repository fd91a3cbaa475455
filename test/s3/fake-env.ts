/**
 * Environments made of incompressible random packs, for copy tests and the S3 benchmark. Registry
 * code moves blobs without interpreting packs, so real zstd archives are not needed here; the
 * env config is real (EnvConfigSchema, canonical JSON) because copy walks it.
 */
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Digest, sha256 } from '../../src/cas/digest.js';
import { ENV_MEDIA_TYPE, EnvConfigSchema, type PackRef } from '../../src/layer/env.js';
import { putJsonBlob } from '../../src/registry/blobs.js';
import type { Registry } from '../../src/registry/registry.js';

export interface FakeEnv {
  env: Digest;
  packs: PackRef[];
  /** Every blob the env reaches (env config, manifest, packs, indexes), without duplicates. */
  blobs: Digest[];
  /** Bytes of the blobs created by this call (shared packs not counted). */
  newBytes: number;
}

/** Pushes one environment: a fresh pack per entry of `packSizes`, plus `reuse` packs already there. */
export async function pushFakeEnv(reg: Registry, tag: string, opts: { packSizes: number[]; reuse?: PackRef[]; scratch: string }): Promise<FakeEnv> {
  const packs: PackRef[] = [...(opts.reuse ?? [])];
  let newBytes = 0;
  for (const size of opts.packSizes) {
    const data = randomBytes(size);
    const pack = sha256(data);
    const path = join(opts.scratch, `pack-${pack.slice(7, 23)}`);
    await writeFile(path, data);
    await reg.putBlobFile(pack, path);
    await rm(path, { force: true });
    const indexBytes = Buffer.from(JSON.stringify({ pack, objects: [{ digest: sha256(pack), offset: 0, length: size }] }));
    const index = sha256(indexBytes);
    await reg.putBlob(index, indexBytes);
    await reg.putPack(pack, index);
    packs.push({ pack, index });
    newBytes += size + indexBytes.length;
  }
  const manifestBytes = randomBytes(2000);
  const manifest = sha256(manifestBytes);
  await reg.putBlob(manifest, manifestBytes);
  newBytes += manifestBytes.length;
  const config = EnvConfigSchema.parse({
    mediaType: ENV_MEDIA_TYPE,
    layers: [{ digest: sha256(`layer of ${tag} ${manifest}`), manifest, packs, size: 0, entries: 0, objects: 0 }],
    config: { workdir: '/testbed' },
  });
  const env = await putJsonBlob(reg, config);
  await reg.putRef(tag, env);
  const blobs = [...new Set([env, manifest, ...packs.flatMap((p) => [p.pack, p.index])])];
  return { env, packs, blobs, newBytes };
}
