/**
 * Build planning (pure): a dataset and its specs become a dependency graph of build nodes,
 * base -> env (per distinct recipe chain) -> history (per env and repository, where the dataset's
 * commits of a repository share history: see plan-history.ts) -> instance (per row), in
 * topological order.
 *
 * A node's cache key is `cacheKey(normalized recipe, digests of every lower layer)`, and those
 * digests exist only once the lower nodes are built (or found cached), so the plan carries each
 * node's recipe digest and its parent; the executor computes the key with `nodeKey` when the
 * parents are done. Identical recipe chains collapse into one node: 500 instances over 60
 * (repo, version) pairs with 60 distinct env recipes give 1 base + 60 env + 500 instance nodes.
 *
 * Running a node (the executor's contract; run nodes with runGraph(scheduleNodes(plan.nodes), ...)):
 *   1. lower = digests of the layers below it, lowest first: the built layers of lowerChain(plan, id),
 *      preceded by the layers of `parentRef`'s environment if the chain starts at a ref;
 *   2. key = nodeKey(node, lower); if registry ref cacheRefName(kind, key) exists (and no --force),
 *      the node is cached: its layer is what that ref names;
 *   3. otherwise build into a fresh directory / upper dir: base via baseRootfsCommand or
 *      populateBusyboxRoot; env via envBuildScript in a build sandbox over the lower layers (files
 *      staged per stagedFiles, env from effectiveEnv); instance via checkoutAtCommit into
 *      <upper><workdir>, then instanceBuildScript in the sandbox; capture; publish the layer;
 *   4. only then write the cache ref, and for a node with a `tag`, the environment (layers +
 *      runtimeConfigFor) under that tag. A failed build writes no ref, so a rerun retries it.
 */
import { join, resolve } from 'node:path';
import { type Digest, digestHex, sha256 } from '../cas/digest.js';
import { InvalidInputError } from '../errors.js';
import type { RecipeCatalog } from '../recipe/catalog.js';
import { parentSource } from '../recipe/catalog.js';
import { cacheKey } from '../recipe/key.js';
import { type NormalizedRecipe, normalizeHistory, normalizeInstance, recipeDigest } from '../recipe/normalize.js';
import type { HistoryRecipe, InstanceRecipe, Recipe, RecipeKind, RepoSource } from '../recipe/schema.js';
import { parseRefName } from '../cas/ref-name.js';
import type { LocatedRow } from '../dataset/row.js';
import { lookupSpec, type Specs } from '../dataset/specs.js';
import { type Shard, WHOLE, selectShard } from './plan-shard.js';
import { historyPath, type RepoHistory } from './plan-history.js';

/** What scoring needs from the specs, carried on instance nodes for the environment's runtime config. */
export interface InstanceTest {
  testCmd: string;
  logParser: string;
  evalEnv: Record<string, string>;
  workdir: string;
}

export interface PlanNode {
  /** Stable within and across runs: `<kind>:<16 hex of identity>`, or `instance:<instance_id>`. */
  id: string;
  kind: RecipeKind;
  /** For humans: recipe name, file name, or instance id. */
  label: string;
  /** Catalog source of the recipe, or the dataset location (`file:line`) of an instance. */
  source: string;
  /** The recipe for the executor, every local path absolute. */
  recipe: Recipe;
  normalized: NormalizedRecipe;
  recipeDigest: Digest;
  /** The plan node this one is built on; null for a base or when the parent is a registry ref. */
  parent: string | null;
  /** Registry ref (an environment) the node is built on, when the recipe names one. */
  parentRef: string | null;
  /** Tag to write when built: `<dataset>/<instance_id>` for instances. */
  tag: string | null;
  /** Instances of this plan that need this node (its own id for an instance). */
  instanceIds: string[];
  test: InstanceTest | null;
}

export interface BuildPlan {
  dataset: string;
  shard: Shard;
  /** Topological: every node after its parent. */
  nodes: PlanNode[];
}

export interface DatasetPlanInput {
  /** Dataset name: the first part of every tag. */
  dataset: string;
  rows: readonly LocatedRow[];
  specs: Specs;
  /** Where to fetch a repository (`owner/name`) from: see `defaultRepoSource`. */
  repoSource: (repo: string) => RepoSource;
  shard?: Shard;
  /** repo -> shared history base (computeHistoryBases); repos not in it get plain checkouts. */
  historyBases?: ReadonlyMap<string, string>;
  /**
   * repo -> shared history base and segments (computeRepoHistories; wins over historyBases):
   * instances then also share the history between the base and their commits, segment by segment.
   */
  histories?: ReadonlyMap<string, RepoHistory>;
}

/**
 * Where repositories come from: with a repos directory, `<dir>/<owner>/<name>` (a working
 * repository or a bare mirror, e.g. made by `git clone --mirror`); without, GitHub.
 */
export function defaultRepoSource(reposDir?: string): (repo: string) => RepoSource {
  if (reposDir === undefined) return (repo) => ({ url: `https://github.com/${repo}.git` });
  const dir = resolve(reposDir);
  return (repo) => ({ path: join(dir, repo) });
}

/** The key of a node once the digests of all its lower layers (lowest first) are known. */
export function nodeKey(node: PlanNode, lowerLayerDigests: readonly Digest[]): Digest {
  return cacheKey(node.normalized, lowerLayerDigests);
}

export function indexPlan(plan: BuildPlan): ReadonlyMap<string, PlanNode> {
  return new Map(plan.nodes.map((n) => [n.id, n]));
}

/** Ids of the nodes below `id`, lowest first (the layers to stack under it). Pass `indexPlan(plan)` when asking for many nodes. */
export function lowerChain(plan: BuildPlan | ReadonlyMap<string, PlanNode>, id: string): string[] {
  const byId = plan instanceof Map ? plan : indexPlan(plan as BuildPlan);
  const chain: string[] = [];
  for (let n = byId.get(id)?.parent ?? null; n !== null; n = byId.get(n)?.parent ?? null) chain.unshift(n);
  return chain;
}

/** Dataset name from its file: `swe-bench-lite.jsonl` -> `swe-bench-lite`; a file called `dataset.*` takes its directory's name. */
export function datasetNameFromFile(file: string): string {
  const parts = file.split('/').filter((p) => p !== '');
  const base = (parts.at(-1) ?? 'dataset').replace(/\.(jsonl|json)$/, '');
  const name = base === 'dataset' && parts.length > 1 ? (parts.at(-2) ?? base) : base;
  return parseRefName(name.replace(/[^A-Za-z0-9._+@=-]/g, '_').replace(/^[.-]/, '_'));
}

function shortName(source: string): string {
  const hash = source.indexOf('#');
  return hash >= 0 ? source.slice(hash + 1) : (source.split('/').at(-1) ?? source);
}

/** Adds the chain of recipe nodes ending at `source` (memoized); returns the id of its top node. */
function addRecipeChain(catalog: RecipeCatalog, source: string, nodes: Map<string, PlanNode>, bySource: Map<string, string>): string {
  const known = bySource.get(source);
  if (known !== undefined) return known;
  const entry = catalog.get(source);
  if (!entry) throw new InvalidInputError(`recipe ${source} is not in the catalog`, 'load recipes with loadSpecs or loadRecipeCatalog before planning');
  const ps = parentSource(entry.recipe);
  const parent = ps === undefined ? null : addRecipeChain(catalog, ps, nodes, bySource);
  const parentRef = entry.recipe.kind !== 'base' && 'ref' in entry.recipe.parent ? entry.recipe.parent.ref : null;
  const identity = sha256(`${entry.digest}\n${parent ?? ''}\n${parentRef ?? ''}`);
  const id = `${entry.recipe.kind}:${digestHex(identity).slice(0, 16)}`;
  if (!nodes.has(id)) {
    nodes.set(id, {
      id,
      kind: entry.recipe.kind,
      label: entry.recipe.name ?? shortName(source),
      source,
      recipe: entry.recipe,
      normalized: entry.normalized,
      recipeDigest: entry.digest,
      parent,
      parentRef,
      tag: null,
      instanceIds: [],
      test: null,
    });
  }
  bySource.set(source, id);
  return id;
}

/** The graph for one recipe and its parent chain (`minisandbox build RECIPE`). */
export function planRecipe(catalog: RecipeCatalog, source: string, tag: string | null = null): BuildPlan {
  const nodes = new Map<string, PlanNode>();
  const top = addRecipeChain(catalog, source, nodes, new Map());
  const topNode = nodes.get(top);
  if (topNode && tag !== null) topNode.tag = parseRefName(tag);
  return { dataset: '', shard: WHOLE, nodes: [...nodes.values()] };
}

/**
 * The history layer of `repo` on env node `envId` (memoized): one per env and repository, so
 * every instance of the repository on that env stacks on it. Its recipe names no env, so the
 * layer is the same bytes on every env it is built on (one copy in the registry), but it is a
 * node per env because a layer list is a stack: an instance's lower layers are one chain.
 */
function addHistoryNode(envId: string, envSource: string, repo: string, source: RepoSource, base: string, nodes: Map<string, PlanNode>): string {
  const id = `history:${digestHex(sha256(`${envId}\n${repo}\n${base}`)).slice(0, 16)}`;
  if (nodes.has(id)) return id;
  const recipe: HistoryRecipe = {
    kind: 'history',
    name: `history of ${repo}`,
    parent: { recipe: envSource },
    repoName: repo,
    repo: source,
    base,
    path: historyPath(repo),
  };
  const normalized = normalizeHistory(recipe);
  nodes.set(id, {
    id,
    kind: 'history',
    label: `${repo}@${base.slice(0, 12)}`,
    source: repo,
    recipe,
    normalized,
    recipeDigest: recipeDigest(normalized),
    parent: envId,
    parentRef: null,
    tag: null,
    instanceIds: [],
    test: null,
  });
  return id;
}

/** The graph for (a shard of) a dataset. Throws, naming the row, on an unknown repo/version or a bad tag. */
export function planDataset(input: DatasetPlanInput): BuildPlan {
  const shard = input.shard ?? WHOLE;
  const dataset = parseRefName(input.dataset);
  const rows = selectShard(input.rows, shard, (r) => r.row);
  const nodes = new Map<string, PlanNode>();
  const bySource = new Map<string, string>();
  for (const { row, where } of rows) {
    const spec = lookupSpec(input.specs, row.repo, row.version, where);
    const envId = addRecipeChain(input.specs.catalog, spec.env, nodes, bySource);
    const recipe: InstanceRecipe = {
      kind: 'instance',
      name: row.instance_id,
      parent: { recipe: spec.env },
      repoName: row.repo,
      repo: input.repoSource(row.repo),
      commit: row.base_commit,
      workdir: spec.workdir,
      // the harness's instance script: pre_install, install, then build
      commands: [...spec.preInstall, ...spec.install, ...spec.build],
      env: {},
      shell: '/bin/sh',
    };
    const repoHistory = input.histories?.get(row.repo);
    const historyBase = repoHistory?.base ?? input.historyBases?.get(row.repo);
    let parent = envId;
    if (historyBase !== undefined) {
      const segments = repoHistory?.segments.get(row.base_commit);
      recipe.history = {
        base: historyBase,
        path: historyPath(row.repo),
        ...(segments !== undefined && segments.length > 0 ? { segments: segments.map((x) => ({ commit: x.commit, after: [...x.after] })) } : {}),
      };
      parent = addHistoryNode(envId, spec.env, row.repo, recipe.repo, historyBase, nodes);
    }
    const normalized = normalizeInstance(recipe);
    const id = `instance:${row.instance_id}`;
    if (nodes.has(id)) throw new InvalidInputError(`${where}: duplicate instance_id ${row.instance_id}`, 'instance ids must be unique in a dataset');
    let tag: string;
    try {
      tag = parseRefName(`${dataset}/${row.instance_id}`);
    } catch {
      throw new InvalidInputError(
        `${where}: instance_id ${JSON.stringify(row.instance_id)} cannot be part of a tag`,
        'instance ids are letters, digits and . _ + @ = -',
      );
    }
    nodes.set(id, {
      id,
      kind: 'instance',
      label: row.instance_id,
      source: where,
      recipe,
      normalized,
      recipeDigest: recipeDigest(normalized),
      parent,
      parentRef: null,
      tag,
      instanceIds: [row.instance_id],
      test: { testCmd: spec.testCmd, logParser: spec.logParser, evalEnv: spec.evalEnv, workdir: spec.workdir },
    });
    for (let p: string | null = parent; p !== null; p = nodes.get(p)?.parent ?? null) nodes.get(p)?.instanceIds.push(row.instance_id);
  }
  return { dataset, shard, nodes: [...nodes.values()] };
}

export interface PlanCounts {
  base: number;
  env: number;
  history: number;
  instance: number;
}

export function planCounts(plan: BuildPlan): PlanCounts {
  const c: PlanCounts = { base: 0, env: 0, history: 0, instance: 0 };
  for (const n of plan.nodes) c[n.kind]++;
  return c;
}
