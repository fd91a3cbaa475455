/**
 * Loading recipe files: parse, validate, and resolve every relative path against the recipe's own
 * directory, so a loaded recipe means the same thing whatever the current directory was.
 */
import { dirname, resolve } from 'node:path';
import { parseWith, readStructuredFile } from './structured.js';
import { type Parent, type Recipe, RecipeSchema, type RepoSource } from './schema.js';

export interface LoadedRecipe {
  /** Absolute path of the file, or `<file>#<field>` for a recipe written inline in another file. */
  source: string;
  /** The recipe, with every local path absolute. */
  recipe: Recipe;
}

const HINT = 'see recipes/demo/*.yaml for examples of base, env and instance recipes';

/** Reads and validates a recipe file; errors name the file and the field (`env.yaml: commands[2]: expected string`). */
export async function loadRecipe(file: string): Promise<LoadedRecipe> {
  const abs = resolve(file);
  const value = await readStructuredFile(file);
  return { source: abs, recipe: recipeFromValue(value, file, dirname(abs)) };
}

/** Validates an already parsed recipe (e.g. inline in a specs file) whose relative paths are relative to `baseDir`. */
export function recipeFromValue(value: unknown, where: string, baseDir: string): Recipe {
  return resolvePaths(parseWith(RecipeSchema, value, where, HINT), baseDir);
}

function resolveParent(p: Parent, baseDir: string): Parent {
  return 'recipe' in p ? { recipe: resolve(baseDir, p.recipe) } : p;
}

function resolveRepo(r: RepoSource, baseDir: string): RepoSource {
  if ('path' in r) return { path: resolve(baseDir, r.path) };
  if ('mirror' in r) return { mirror: resolve(baseDir, r.mirror) };
  return r;
}

export function resolvePaths(recipe: Recipe, baseDir: string): Recipe {
  switch (recipe.kind) {
    case 'base': {
      const from = recipe.from.type === 'debootstrap' ? recipe.from : { ...recipe.from, path: resolve(baseDir, recipe.from.path) };
      return { ...recipe, from };
    }
    case 'env':
      return {
        ...recipe,
        parent: resolveParent(recipe.parent, baseDir),
        files: recipe.files.map((f) => ({ ...f, src: resolve(baseDir, f.src) })),
      };
    case 'instance':
    case 'history':
      return { ...recipe, parent: resolveParent(recipe.parent, baseDir), repo: resolveRepo(recipe.repo, baseDir) };
  }
}
