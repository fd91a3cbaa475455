/**
 * The normalized form of a recipe: everything that determines the layer's content and nothing
 * else. Defaults are filled, local content is replaced by its digest (so moving a recipe checkout
 * does not change keys, editing a copied file does), display names and source locations dropped.
 * Parents are not in it: their digests join it in the cache key.
 */
import { z } from 'zod';
import { stat } from 'node:fs/promises';
import { type Digest, DigestSchema, sha256, sha256File } from '../cas/digest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { NotFoundError } from '../errors.js';
import { isErrno } from '../util/fs.js';
import { treeDigest } from './tree.js';
import type { BaseSource, HistoryRecipe, InstanceRecipe, Recipe } from './schema.js';

const Vars = z.record(z.string(), z.string());

export const NormalizedBaseSchema = z.strictObject({
  v: z.literal(1),
  kind: z.literal('base'),
  from: z.discriminatedUnion('type', [
    z.strictObject({
      type: z.literal('debootstrap'),
      suite: z.string(),
      variant: z.string(),
      include: z.array(z.string()),
      mirror: z.string(),
      arch: z.string().optional(),
    }),
    z.strictObject({ type: z.literal('tarball'), digest: DigestSchema }),
    z.strictObject({ type: z.literal('directory'), digest: DigestSchema }),
    z.strictObject({ type: z.literal('busybox'), digest: DigestSchema }),
  ]),
});

export const NormalizedEnvSchema = z.strictObject({
  v: z.literal(1),
  kind: z.literal('env'),
  commands: z.array(z.string()),
  env: Vars,
  files: z.array(z.strictObject({ dest: z.string(), digest: DigestSchema, mode: z.number().int().optional() })),
  workdir: z.string(),
  network: z.boolean(),
  shell: z.string(),
});

export const NormalizedInstanceSchema = z.strictObject({
  v: z.literal(1),
  kind: z.literal('instance'),
  repoName: z.string().optional(),
  commit: z.string(),
  workdir: z.string(),
  commands: z.array(z.string()),
  env: Vars,
  shell: z.string(),
  history: z
    .strictObject({ base: z.string(), path: z.string(), segments: z.array(z.strictObject({ commit: z.string(), after: z.array(z.string()) })).optional() })
    .optional(),
});

/** The source location is not in it: the base commit pins the content. */
export const NormalizedHistorySchema = z.strictObject({
  v: z.literal(1),
  kind: z.literal('history'),
  repoName: z.string().optional(),
  base: z.string(),
  path: z.string(),
});

export const NormalizedRecipeSchema = z.discriminatedUnion('kind', [
  NormalizedBaseSchema,
  NormalizedEnvSchema,
  NormalizedInstanceSchema,
  NormalizedHistorySchema,
]);
export type NormalizedRecipe = z.infer<typeof NormalizedRecipeSchema>;
export type NormalizedBase = z.infer<typeof NormalizedBaseSchema>;
export type NormalizedInstance = z.infer<typeof NormalizedInstanceSchema>;
export type NormalizedHistory = z.infer<typeof NormalizedHistorySchema>;

async function fileDigest(path: string): Promise<Digest> {
  try {
    return (await sha256File(path)).digest;
  } catch (e) {
    if (isErrno(e, 'ENOENT')) throw new NotFoundError(path, 'a recipe names a local file that does not exist; fix the path (relative to the recipe file)');
    throw e;
  }
}

async function normalizeBaseSource(f: BaseSource): Promise<NormalizedBase['from']> {
  switch (f.type) {
    case 'debootstrap':
      return {
        type: 'debootstrap',
        suite: f.suite,
        variant: f.variant,
        include: [...new Set(f.include)].sort(),
        mirror: f.mirror.replace(/\/+$/, ''),
        arch: f.arch,
      };
    case 'tarball':
      return { type: 'tarball', digest: await fileDigest(f.path) };
    case 'busybox':
      return { type: 'busybox', digest: await fileDigest(f.path) };
    case 'directory':
      return { type: 'directory', digest: await treeDigest(f.path, { owners: true }) };
  }
}

/** Normalizes a loaded recipe (paths already absolute); reads and hashes local content it names. */
export async function normalizeRecipe(recipe: Recipe): Promise<NormalizedRecipe> {
  switch (recipe.kind) {
    case 'base':
      return { v: 1, kind: 'base', from: await normalizeBaseSource(recipe.from) };
    case 'env': {
      const files = [];
      for (const f of recipe.files) {
        const st = await stat(f.src).catch((e: unknown) => {
          if (isErrno(e, 'ENOENT'))
            throw new NotFoundError(f.src, 'an env recipe copies in a file that does not exist; fix `files[].src` (relative to the recipe file)');
          throw e;
        });
        const digest = st.isDirectory() ? await treeDigest(f.src, { owners: false }) : await fileDigest(f.src);
        files.push({ dest: f.dest, digest, mode: f.mode ?? st.mode & 0o7777 });
      }
      return {
        v: 1,
        kind: 'env',
        commands: recipe.commands,
        env: recipe.env,
        // Given order: a later file may overwrite (or land inside) an earlier one.
        files,
        workdir: recipe.workdir,
        network: recipe.network,
        shell: recipe.shell,
      };
    }
    case 'instance':
      return normalizeInstance(recipe);
    case 'history':
      return normalizeHistory(recipe);
  }
}

export function normalizeHistory(recipe: HistoryRecipe): NormalizedHistory {
  return { v: 1, kind: 'history', repoName: recipe.repoName, base: recipe.base, path: recipe.path };
}

/** Instance recipes name no local content, so they normalize without I/O (plans build them from dataset rows). */
export function normalizeInstance(recipe: InstanceRecipe): NormalizedInstance {
  return {
    v: 1,
    kind: 'instance',
    repoName: recipe.repoName,
    commit: recipe.commit,
    workdir: recipe.workdir,
    commands: recipe.commands,
    env: recipe.env,
    shell: recipe.shell,
    history: recipe.history,
  };
}

/** sha256 of the normalized recipe alone: identifies "the same recipe" before parents are known. */
export function recipeDigest(n: NormalizedRecipe): Digest {
  return sha256(canonicalJson(n));
}
