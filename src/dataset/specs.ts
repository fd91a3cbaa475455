/**
 * The specs file (YAML or JSON): how to build and test each (repo, version) of a dataset, as
 * SWE-bench's MAP_REPO_VERSION_TO_SPECS does.
 *
 *   base: base.yaml                     # base recipe: a path or an inline recipe
 *   defaults: {testCmd: ..., logParser: pytest, workdir: /testbed}
 *   repos:
 *     owner/name:
 *       "1.0":
 *         env: env-1.0.yaml             # env recipe: a path or inline (an inline one without
 *                                       #   `parent` sits on the base)
 *         preInstall: [...]             # run in the checkout before install
 *         install: [...]                # e.g. an editable install
 *         testCmd: python3 -m pytest -rA  # or a list of commands, one per line (the harness's test_cmd)
 *         logParser: pytest             # a name from score/parsers/registry.ts; when neither the
 *                                       #   entry nor defaults names one, the harness's parser for
 *                                       #   the repository (REPO_PARSERS), else pytest
 *         build: [make]                 # run after the test patch is applied, before the tests
 *                                       #   (and after install when the instance is built)
 *         evalEnv: {KEY: value}         # extra variables while scoring
 *       "*":                            # every version without an entry of its own (Multi-SWE-bench
 *         ...                           #   rows are versioned by pull request number)
 *       "2.0":
 *         image: docker://host/repo:tag # an existing container image instead of recipes: per
 *                                       #   (repo, version), or a template over the instance
 *                                       #   (`{id}`: SWE-bench's image name for it; see image/dataset-images.ts),
 *                                       #   or a dataset's own: dataset:swe-bench, dataset:multi-swe-bench, ...
 *         preTest: [source /opt/miniconda3/bin/activate testbed]   # run before the tests when scoring
 *
 * `base` is needed only when some entry builds from recipes.
 */
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { InvalidInputError } from '../errors.js';
import { addToCatalog, type CatalogEntry, type RecipeCatalog } from '../recipe/catalog.js';
import { loadRecipe, recipeFromValue } from '../recipe/load.js';
import { AbsolutePathSchema, CommandSchema, EnvVarsSchema } from '../recipe/schema.js';
import { formatFieldPath, parseWith, readStructuredFile } from '../recipe/structured.js';
// The parser names are pure data about score's parsers; checking them at load names the file and field.
import { defaultParser, PARSER_NAMES, parserName, REPO_VERSION_PARSERS } from '../score/parsers/registry.js';
import { expandImageTemplate } from './image-templates.js';
import { RepoNameSchema } from './row.js';

const RecipeRefSchema = z.union([z.string().min(1), z.record(z.string(), z.unknown())]);

/** One command, or the harness's list of them (run one per line, as its eval script does). */
const TestCmdSchema = z
  .union([z.string().min(1, 'expected the test command'), z.array(z.string().min(1)).min(1, 'expected the test command')])
  .transform((c) => (typeof c === 'string' ? c : c.join('\n')));

export const SpecSchema = z.strictObject({
  /** Env recipe; absent when the entry names an image. */
  env: RecipeRefSchema.optional(),
  /** A container image (or template) the instances' environments are imported from, instead of recipes. */
  image: z.string().min(1).optional(),
  /** Commands run before the test command when scoring (e.g. activating a conda env, as SWE-bench's eval scripts do). */
  // optional, not defaulted: a default in each entry's partial parse would hide the one in `defaults`
  preTest: z.array(CommandSchema).optional(),
  preInstall: z.array(CommandSchema).default([]),
  install: z.array(CommandSchema).default([]),
  testCmd: TestCmdSchema,
  /** Absent: the repository's default (resolveParser). */
  logParser: z.string().min(1).optional(),
  /** Commands run after the test patch is applied and before the test command (the harness's `build`). */
  build: z.array(CommandSchema).default([]),
  evalEnv: EnvVarsSchema.default({}),
  workdir: AbsolutePathSchema.default('/testbed'),
});
/**
 * `defaults` and each version: every field optional and without the built-in defaults (zod's
 * `.partial()` keeps them and fills them in, so a version would override `defaults` with them);
 * those apply once, when the two are merged (SpecSchema).
 */
const PartialSpecSchema = z.strictObject({
  env: RecipeRefSchema.optional(),
  image: z.string().min(1).optional(),
  preTest: z.array(CommandSchema).optional(),
  preInstall: z.array(CommandSchema).optional(),
  install: z.array(CommandSchema).optional(),
  testCmd: TestCmdSchema.optional(),
  logParser: z.string().min(1).optional(),
  build: z.array(CommandSchema).optional(),
  evalEnv: EnvVarsSchema.optional(),
  workdir: AbsolutePathSchema.optional(),
});

export const SpecsFileSchema = z.strictObject({
  base: RecipeRefSchema.optional(),
  defaults: PartialSpecSchema.default({}),
  repos: z.record(RepoNameSchema, z.record(z.string().min(1), PartialSpecSchema)),
});

export interface ResolvedSpec {
  repo: string;
  version: string;
  /** Catalog source of the env recipe ('' for an entry with an image). */
  env: string;
  /** Image source or template, for entries that import images instead of building. */
  image?: string;
  preTest: string[];
  preInstall: string[];
  install: string[];
  testCmd: string;
  /** A registry name (score/parsers/registry.ts), checked at load. */
  logParser: string;
  build: string[];
  evalEnv: Record<string, string>;
  workdir: string;
}

export interface Specs {
  file: string;
  /** Catalog source of the base recipe ('' when every entry names an image). */
  base: string;
  /** Every recipe the specs reach, parents included. */
  catalog: RecipeCatalog;
  /** Keyed by specKey(repo, version). */
  entries: Map<string, ResolvedSpec>;
}

export function specKey(repo: string, version: string): string {
  return `${repo}@${version}`;
}

async function addRecipeRef(
  catalog: RecipeCatalog,
  ref: string | Record<string, unknown>,
  file: string,
  field: string,
  defaultParent?: string,
): Promise<CatalogEntry> {
  const baseDir = dirname(file);
  if (typeof ref === 'string') {
    const loaded = await loadRecipe(resolve(baseDir, ref));
    return addToCatalog(catalog, loaded.source, loaded.recipe);
  }
  const source = `${file}#${field}`;
  const value = defaultParent !== undefined && ref.parent === undefined && ref.kind === 'env' ? { ...ref, parent: { recipe: defaultParent } } : ref;
  return addToCatalog(catalog, source, recipeFromValue(value, source, baseDir));
}

function unknownParser(path: string, field: string, name: string): InvalidInputError {
  return new InvalidInputError(`${path}: ${field}: unknown log parser ${JSON.stringify(name)}`, `name one of: ${PARSER_NAMES.join(', ')}`);
}

/**
 * The entry's parser: its own or the defaults' (checked against the registry), else the harness's
 * for the repository, else pytest. A repository the harness grades per instance has no default for
 * a version it never graded: the specs must name one.
 */
function resolveParser(path: string, field: string, named: string | undefined, repo: string, version: string): string {
  if (named !== undefined) {
    const name = parserName(named);
    if (name === null) throw unknownParser(path, field, named);
    return name;
  }
  const dflt = defaultParser(repo, version);
  if (dflt !== null) return dflt;
  if (Object.hasOwn(REPO_VERSION_PARSERS, repo)) {
    const known = Object.entries(REPO_VERSION_PARSERS[repo]!).map(([v, p]) => `${v}: ${p}`);
    throw new InvalidInputError(
      `${path}: ${field}: the harness picks ${repo}'s log parser per instance and has none for version ${JSON.stringify(version)}`,
      `set logParser for this entry (the harness's: ${known.join(', ')})`,
    );
  }
  return 'pytest';
}

/**
 * Top-level keys starting with `x-` hold what other entries share through YAML anchors and merge
 * keys (`x-django: &django {...}`, then `"3.1": {<<: *django, testCmd: ...}`), as in compose
 * files; they are not part of the specs.
 */
function withoutExtensionKeys(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  return Object.fromEntries(Object.entries(value).filter(([k]) => !k.startsWith('x-')));
}

/** Reads a specs file and every recipe it reaches; errors name the file and the field. */
export async function loadSpecs(path: string): Promise<Specs> {
  const file = resolve(path);
  const raw = parseWith(SpecsFileSchema, withoutExtensionKeys(await readStructuredFile(path)), path, 'see recipes/demo/specs.yaml');
  const catalog: RecipeCatalog = new Map();
  let base: CatalogEntry | undefined;
  if (raw.base !== undefined) {
    base = await addRecipeRef(catalog, raw.base, file, 'base');
    if (base.recipe.kind !== 'base') throw new InvalidInputError(`${path}: base: ${base.source} is a ${base.recipe.kind} recipe, expected kind: base`);
  }
  if (raw.defaults.logParser !== undefined && parserName(raw.defaults.logParser) === null) {
    throw unknownParser(path, 'defaults.logParser', raw.defaults.logParser);
  }
  const entries = new Map<string, ResolvedSpec>();
  for (const [repo, versions] of Object.entries(raw.repos)) {
    for (const [version, partial] of Object.entries(versions)) {
      const field = formatFieldPath(['repos', repo, version]);
      // an entry's own env or image wins over the other one given in defaults
      const merged = { ...raw.defaults, ...partial };
      if (partial.env !== undefined && partial.image === undefined) delete merged.image;
      if (partial.image !== undefined && partial.env === undefined) delete merged.env;
      const spec = parseWith(SpecSchema, merged, `${path}: ${field}`);
      const parserField = partial.logParser === undefined && raw.defaults.logParser !== undefined ? 'defaults.logParser' : `${field}.logParser`;
      const logParser = resolveParser(path, parserField, spec.logParser, repo, version);
      if (spec.image !== undefined) {
        if (spec.env !== undefined)
          throw new InvalidInputError(`${path}: ${field}: both env and image given`, 'an entry either builds from an env recipe or imports an image');
        const { env: _env, image, ...rest } = spec;
        void _env;
        entries.set(specKey(repo, version), {
          ...rest,
          image: expandImageTemplate(image, `${path}: ${field}.image`),
          logParser,
          preTest: spec.preTest ?? [],
          repo,
          version,
          env: '',
        });
        continue;
      }
      if (spec.env === undefined) throw new InvalidInputError(`${path}: ${field}: expected env (a recipe) or image`);
      if (base === undefined) throw new InvalidInputError(`${path}: base: expected the base recipe (entries build from recipes)`);
      const env = await addRecipeRef(catalog, spec.env, file, `${field}.env`, base.source);
      if (env.recipe.kind !== 'env') throw new InvalidInputError(`${path}: ${field}.env: ${env.source} is a ${env.recipe.kind} recipe, expected kind: env`);
      const { image: _image, ...rest } = spec;
      void _image;
      entries.set(specKey(repo, version), { ...rest, logParser, preTest: spec.preTest ?? [], repo, version, env: env.source });
    }
  }
  return { file, base: base?.source ?? '', catalog, entries };
}

/** The version key of an entry that serves every version of its repo the specs name no entry for. */
export const ANY_VERSION = '*';

/**
 * The spec for a row's (repo, version), else the repo's `"*"` entry, or an error naming the row
 * and what the specs do have.
 */
export function lookupSpec(specs: Specs, repo: string, version: string, where: string): ResolvedSpec {
  const spec = specs.entries.get(specKey(repo, version)) ?? specs.entries.get(specKey(repo, ANY_VERSION));
  if (spec) return spec;
  const versions = [...specs.entries.values()].filter((s) => s.repo === repo).map((s) => JSON.stringify(s.version));
  const known = versions.length > 0 ? `it has versions ${versions.join(', ')} of ${repo}` : `it has no entry for repo ${repo}`;
  throw new InvalidInputError(
    `${where}: no spec for repo ${repo} version ${JSON.stringify(version)} in ${specs.file} (${known})`,
    `add repos["${repo}"]["${version}"] to the specs file, or drop the instance`,
  );
}
