/** What an environment reaches in a registry: the blobs a ref keeps alive. */
import type { Digest } from '../cas/digest.js';
import { type EnvConfig, EnvConfigSchema } from '../layer/env.js';
import { readJsonBlob } from './blobs.js';
import type { Registry } from './registry.js';

export interface EnvClosure {
  env: Digest;
  config: EnvConfig;
  /** Every blob reached, the env config included. */
  blobs: Set<Digest>;
  /** pack -> index for every pack reached. */
  packs: Map<Digest, Digest>;
}

export function closureOfConfig(env: Digest, config: EnvConfig): EnvClosure {
  const blobs = new Set<Digest>([env]);
  const packs = new Map<Digest, Digest>();
  // an imported image's implicit dirs: what a later import of a layer converted before needs
  for (const l of config.image?.layers ?? []) if (l.implicitDirs !== undefined) blobs.add(l.implicitDirs);
  for (const layer of config.layers) {
    blobs.add(layer.manifest);
    for (const p of layer.packs) {
      blobs.add(p.pack);
      blobs.add(p.index);
      packs.set(p.pack, p.index);
    }
  }
  return { env, config, blobs, packs };
}

export async function envClosure(reg: Registry, env: Digest): Promise<EnvClosure> {
  return closureOfConfig(env, await readJsonBlob(reg, env, EnvConfigSchema, 'environment config'));
}
