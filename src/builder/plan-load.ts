/**
 * The side-effect edge of planning: read the dataset, the specs and every recipe they reach, then
 * plan (pure). One call for `minisandbox build DATASET --specs FILE [--repos DIR] [--shard I/N]`
 * and one for `minisandbox build RECIPE`.
 */
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { loadRecipeCatalog } from '../recipe/catalog.js';
import { type BuildPlan, datasetNameFromFile, defaultRepoSource, planDataset, planRecipe } from './plan.js';
import { type Shard, parseShard } from './plan-shard.js';
import { computeRepoHistories } from './plan-history.js';

export interface DatasetBuildArgs {
  dataset: string;
  specs: string;
  /** Directory of repositories as `<owner>/<name>`; without it, GitHub URLs. */
  repos?: string;
  /** `I/N` or a parsed shard. */
  shard?: string | Shard;
  /** Tag prefix; default from the dataset file name (see datasetNameFromFile). */
  name?: string;
  /**
   * Store each local repository's common history once, shared by its instance layers (default
   * true). Off: every instance layer carries its full history.
   */
  sharedHistory?: boolean;
}

export async function loadDatasetPlan(args: DatasetBuildArgs): Promise<BuildPlan> {
  const [specs, rows] = await Promise.all([loadSpecs(args.specs), loadDataset(args.dataset)]);
  const repoSource = defaultRepoSource(args.repos);
  return planDataset({
    dataset: args.name ?? datasetNameFromFile(args.dataset),
    rows,
    specs,
    repoSource,
    shard: typeof args.shard === 'string' ? parseShard(args.shard) : args.shard,
    histories: args.sharedHistory === false ? undefined : await computeRepoHistories(rows, repoSource),
  });
}

/** A recipe file and its parent chain; `tag` names the result (e.g. `images/py311`). */
export async function loadRecipePlan(file: string, tag: string | null = null): Promise<BuildPlan> {
  const { catalog, root } = await loadRecipeCatalog(file);
  return planRecipe(catalog, root.source, tag);
}
