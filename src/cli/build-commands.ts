/** `minisandbox build`: a whole dataset (with its specs) or one recipe. */
import type { Command } from 'commander';
import { join } from 'node:path';
import { executePlan, type SummaryRow } from '../build/execute.js';
import { datasetNameFromFile, defaultRepoSource, planCounts, planDataset, planRecipe } from '../build/plan.js';
import { parseShard } from '../build/plan-shard.js';
import { computeRepoHistories } from '../build/plan-history.js';
import { selectInstances } from '../dataset/select.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';
import { PhaseClock } from '../build/phases.js';
import { MinisandboxError } from '../errors.js';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs } from '../dataset/specs.js';
import { loadRecipeCatalog } from '../recipe/catalog.js';
import { reapStale } from '../runtime/open.js';
import { type GlobalOptions, makeContext, parseDuration, parseSize } from './context.js';
import { EXIT, table } from './output.js';

type Globals = () => GlobalOptions;

interface BuildOpts extends SelectionFlags {
  specs?: string;
  repos?: string;
  jobs: string;
  keepGoing?: boolean;
  shard?: string;
  force?: boolean;
  tag?: string;
  logDir?: string;
  timeout: string;
  dataset?: string;
  ramUpper: string;
}

export function registerBuildCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  const cmd = program
    .command('build')
    .description('build a dataset (JSONL/JSON rows + --specs) or one recipe (YAML/JSON) into layers; cached keys are not rebuilt')
    .argument('<dataset-or-recipe>')
    .option('--specs <file>', 'specs mapping (repo, version) to env recipe, test command, log parser (datasets)')
    .option('--repos <dir>', 'where repositories live: <dir>/<owner>/<name> (default: fetch from GitHub)')
    .option('--dataset <name>', 'dataset name for tags (default: from the file name)')
    .option('--jobs <n>', 'nodes built at once', '1')
    .option('--keep-going', 'go on with the rest when a node fails')
    .option('--shard <i/n>', 'build only shard i of n (0-based) of the instances')
    .option('--force', 'rebuild even when a cache key is present')
    .option('--tag <ref>', 'tag for a single recipe build')
    .option('--log-dir <dir>', 'where per-node build logs go (default: <store>/logs/<dataset>)')
    .option('--timeout <duration>', 'limit for one node\'s build commands', '2h')
    .option('--ram-upper <size|auto>', 'RAM each build sandbox writes into (a tmpfs; a build that outgrows it runs again on disk); auto: half the available memory / jobs; 0: on disk', 'auto');
  addSelectionOptions(cmd).action(async (input: string, o: BuildOpts) => {
      // performance.now() counts from process start: node's boot, module loading, option parsing
      const cli = new PhaseClock();
      cli.add('cli-start', performance.now());
      const ctx = makeContext(globals());
      const tPlan = performance.now();
      const isDataset = /\.(jsonl|json)$/.test(input) && o.specs !== undefined;
      let plan;
      if (isDataset) {
        const specs = await loadSpecs(o.specs!);
        const all = await loadDataset(input);
        const rows = selectInstances(all, await selectionFrom(o), (r) => r.row.instance_id);
        const repoSource = defaultRepoSource(o.repos);
        plan = planDataset({
          dataset: o.dataset ?? datasetNameFromFile(input),
          rows,
          specs,
          repoSource,
          ...(o.shard !== undefined ? { shard: parseShard(o.shard) } : {}),
          // From every row, not the selection or the shard: the history layer and the instance
          // keys are then the same whichever part of the dataset a run builds.
          histories: await computeRepoHistories(all, repoSource),
        });
      } else {
        if (/\.(jsonl)$/.test(input)) throw new MinisandboxError('USAGE', 'building a dataset needs --specs FILE', { hint: 'minisandbox build DATASET.jsonl --specs specs.yaml' });
        const { catalog, root } = await loadRecipeCatalog(input);
        plan = planRecipe(catalog, root.source, o.tag ?? null);
      }
      cli.add('plan', performance.now() - tPlan);
      const counts = planCounts(plan);
      const logDir = o.logDir ?? join(ctx.store.root, 'logs', plan.dataset === '' ? 'recipes' : plan.dataset);
      ctx.out.progress({ phase: 'plan', ...counts, message: `plan: ${counts.base} base, ${counts.env} env, ${counts.history} history, ${counts.instance} instance node(s)` });
      await cli.time('reap-stale', () => reapStale(ctx.store));
      const abort = new AbortController();
      const onSig = (): void => abort.abort();
      process.once('SIGINT', onSig);
      process.once('SIGTERM', onSig);
      let rows: SummaryRow[];
      const running = new Set<string>();
      const tBuild = performance.now();
      try {
        rows = await executePlan(plan, {
          registry: ctx.registry,
          store: ctx.store,
          logDir,
          jobs: Math.max(1, Number.parseInt(o.jobs, 10) || 1),
          keepGoing: o.keepGoing === true,
          force: o.force === true,
          timeoutMs: parseDuration(o.timeout),
          ...(o.ramUpper === 'auto' ? {} : { ramUpperBytes: parseSize(o.ramUpper) }),
          signal: abort.signal,
          // a one-node build returns once its layer is published, not after deleting its scratch
          discard: 'detach',
          onEvent: (e) => {
            if (e.type === 'start') running.add(e.node.label);
            if (e.type === 'done') running.delete(e.node.label);
            const now = [...running].slice(0, 3).join(', ');
            if (e.type === 'done') {
              ctx.out.progress({ event: 'done', node: e.node.id, label: e.node.label, status: e.row.status, seconds: e.row.seconds, ...(e.row.log ? { log: e.row.log } : {}), done: e.done, total: e.total, message: `build [${bar(e.done, e.total)}] ${e.done}/${e.total} ${e.row.status} ${e.node.label}${now ? ` | building ${now}` : ''}` });
            } else if (e.type === 'start') {
              ctx.out.progress({ event: 'start', node: e.node.id, label: e.node.label, message: `build: building ${now}` });
            } else {
              ctx.out.progress({ event: 'retry', node: e.node.id, label: e.node.label, attempt: e.attempt, error: e.error, message: `build: retrying ${e.node.label} (${e.error})` });
            }
          },
        });
      } finally {
        process.off('SIGINT', onSig);
        process.off('SIGTERM', onSig);
      }
      cli.add('execute', performance.now() - tBuild);
      const tally = { built: 0, cached: 0, failed: 0, skipped: 0, cancelled: 0 };
      for (const r of rows) tally[r.status]++;
      ctx.out.result({ dataset: plan.dataset, shard: plan.shard, counts, summary: tally, phases: cli.times, nodes: rows }, () =>
        [
          table([['NODE', 'KIND', 'STATUS', 'TIME', 'TAG / LOG'], ...rows.map((r) => [r.label, r.kind, r.status, `${r.seconds.toFixed(1)}s`, r.status === 'failed' ? `${r.log ?? ''}  ${r.error ?? ''}` : (r.tag ?? r.log ?? '')])]),
          '',
          `built ${tally.built}, cached ${tally.cached}, failed ${tally.failed}, skipped ${tally.skipped}${tally.cancelled ? `, cancelled ${tally.cancelled}` : ''}`,
        ].join('\n'),
      );
      if (tally.failed + tally.skipped + tally.cancelled > 0) setExit(EXIT.failed);
    });
}

function bar(done: number, total: number, width = 20): string {
  const n = total === 0 ? width : Math.round((done / total) * width);
  return `${'#'.repeat(n)}${'.'.repeat(width - n)}`;
}
