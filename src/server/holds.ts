/**
 * POST /v1/holds: what this node's store holds of some environments, for a pool's placement:
 * whether each is laid out whole (`present`), else how many of its layers are (warm base layers).
 * Cheap: a ref look-up in the registry, the config from the store (or, once per environment and
 * server, from the registry), and one stat per layer. Nothing is pulled.
 */
import type { Digest } from '../cas/digest.js';
import { existsSync } from 'node:fs';
import { errorMessage, MinisandboxError } from '../errors.js';
import type { EnvConfig } from '../layer/env.js';
import type { Registry } from '../registry/registry.js';
import { readEnvConfig, resolveEnvDigest } from '../registry/resolve-env.js';
import { hostIdShift } from '../runtime/open.js';
import type { StorePaths } from '../store/paths.js';
import { storedEnvConfig } from '../store/pull.js';
import { runPool } from '../util/pool.js';

export interface Hold {
  ref: string;
  /** The environment the ref names; null where the registry has no such ref (or could not say: see error). */
  env: Digest | null;
  present: boolean;
  layers_present: number;
  layers: number;
  error?: { code: string; message: string };
}

/** Configs read from the registry kept per server: immutable, ~1 KB each. */
const MAX_CACHED_CONFIGS = 4096;
/** Refs looked up at once (each a registry round trip for S3). */
const LOOKUPS = 8;

export class NodeHolds {
  private readonly configs = new Map<Digest, EnvConfig>();
  private idShift: Promise<number> | undefined;

  constructor(
    private readonly reg: Registry,
    private readonly store: StorePaths,
  ) {}

  private shift(): Promise<number> {
    return (this.idShift ??= hostIdShift(this.store).catch((e: unknown) => {
      this.idShift = undefined;
      throw e;
    }));
  }

  private async config(digest: Digest): Promise<EnvConfig> {
    const stored = storedEnvConfig(this.store, digest) ?? this.configs.get(digest);
    if (stored !== undefined) return stored;
    const c = await readEnvConfig(this.reg, digest);
    if (this.configs.size >= MAX_CACHED_CONFIGS) this.configs.delete(this.configs.keys().next().value!);
    this.configs.set(digest, c);
    return c;
  }

  async of(refs: readonly string[]): Promise<Hold[]> {
    const idShift = await this.shift();
    const out = new Map<string, Hold>();
    const unique = [...new Set(refs)];
    await runPool(unique, LOOKUPS, async (ref) => {
      try {
        const env = await resolveEnvDigest(this.reg, ref);
        const { layers } = await this.config(env);
        const n = layers.filter((l) => existsSync(this.store.layer(l.digest, idShift))).length;
        out.set(ref, { ref, env, present: n === layers.length, layers_present: n, layers: layers.length });
      } catch (e) {
        const code = e instanceof MinisandboxError ? e.code : 'INTERNAL';
        out.set(ref, {
          ref,
          env: null,
          present: false,
          layers_present: 0,
          layers: 0,
          ...(code === 'NOT_FOUND' ? {} : { error: { code, message: errorMessage(e) } }),
        });
      }
    });
    return unique.map((r) => out.get(r)!);
  }
}
