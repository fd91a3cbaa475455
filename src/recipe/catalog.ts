/**
 * A catalog of loaded, normalized recipes keyed by their source (an absolute file path, or
 * `<file>#<field>` for a recipe inline in another file), closed under parents: every parent
 * recipe a catalog entry names is in the catalog too. Loading is the side-effect edge; planning
 * over a catalog is pure.
 */
import type { Digest } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import { loadRecipe } from './load.js';
import { normalizeRecipe, type NormalizedRecipe, recipeDigest } from './normalize.js';
import type { Recipe } from './schema.js';

export interface CatalogEntry {
  source: string;
  recipe: Recipe;
  normalized: NormalizedRecipe;
  /** sha256 of the normalized recipe (no parents). */
  digest: Digest;
}
export type RecipeCatalog = Map<string, CatalogEntry>;

export function parentSource(recipe: Recipe): string | undefined {
  return recipe.kind !== 'base' && 'recipe' in recipe.parent ? recipe.parent.recipe : undefined;
}

/** Adds a recipe and, recursively, the recipe files its parents name. Detects parent cycles. */
export async function addToCatalog(catalog: RecipeCatalog, source: string, recipe: Recipe, chain: readonly string[] = []): Promise<CatalogEntry> {
  const known = catalog.get(source);
  if (known) return known;
  const normalized = await normalizeRecipe(recipe);
  const entry: CatalogEntry = { source, recipe, normalized, digest: recipeDigest(normalized) };
  const p = parentSource(recipe);
  if (p !== undefined) {
    if (p === source || chain.includes(p))
      throw new InvalidInputError(`${source}: parent cycle ${[...chain, source, p].join(' -> ')}`, 'a recipe cannot be its own ancestor');
    if (!catalog.has(p)) {
      const parent = await loadRecipe(p);
      await addToCatalog(catalog, parent.source, parent.recipe, [...chain, source]);
    }
    const parentKind = catalog.get(p)?.recipe.kind;
    if (parentKind === 'instance') throw new InvalidInputError(`${source}: parent ${p} is an instance recipe`, 'parents are base or env recipes');
  }
  catalog.set(source, entry);
  return entry;
}

/** Loads a recipe file and its parent chain into a new catalog. */
export async function loadRecipeCatalog(file: string): Promise<{ catalog: RecipeCatalog; root: CatalogEntry }> {
  const catalog: RecipeCatalog = new Map();
  const loaded = await loadRecipe(file);
  const root = await addToCatalog(catalog, loaded.source, loaded.recipe);
  return { catalog, root };
}
