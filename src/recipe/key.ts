/**
 * Cache keys: a layer built from the same normalized recipe on top of the same parent layers is the
 * same layer, so it is built once and found again under `_cache/<kind>/<key hex>`.
 */
import { type Digest, digestHex, sha256 } from '../cas/digest.js';
import { canonicalJson } from '../cas/canonical-json.js';
import { parseRefName } from '../cas/ref-name.js';
import type { NormalizedRecipe } from './normalize.js';
import type { RecipeKind } from './schema.js';

/**
 * sha256 of canonical JSON of `{recipe, parents}`. Parent order matters (lowest layer first):
 * the same layers stacked differently are a different filesystem.
 */
export function cacheKey(recipe: NormalizedRecipe, parentDigests: readonly Digest[]): Digest {
  return sha256(canonicalJson({ keyVersion: 1, recipe, parents: parentDigests }));
}

/** Registry ref under which the result of building a key is recorded. */
export function cacheRefName(kind: RecipeKind, key: Digest): string {
  return parseRefName(`_cache/${kind}/${digestHex(key)}`);
}
