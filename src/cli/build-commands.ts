/** `minisandbox build`: a whole dataset (with its specs) or one recipe. What it needs is imported in the action (start-up: see main.ts). */
import type { Command } from 'commander';
import { join } from 'node:path';
import type { BuildEvent, SummaryRow } from '../builder/execute.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';
import { stat } from 'node:fs/promises';
import { InvalidInputError, MinisandboxError, NotFoundError } from '../errors.js';
import type { Specs } from '../dataset/specs.js';
import type { LocatedRow } from '../dataset/row.js';
import type { Shard } from '../builder/plan-shard.js';
import type { DatasetImageItem } from '../image/dataset-images.js';
import { type GlobalOptions, storeContext } from './context.js';
import { opt, option } from './options.js';
import { EXIT, type Output, table } from './output.js';

type Globals = () => GlobalOptions;

interface BuildOpts extends SelectionFlags {
  specs?: string;
  repos?: string;
  jobs: number;
  keepGoing?: boolean;
  shard?: string;
  force?: boolean;
  tag?: string;
  logDir?: string;
  /** Milliseconds. */
  timeout: number;
  dataset?: string;
  ramUpper: number | 'auto';
  platform?: string;
  tlsVerify: 'true' | 'false';
}

/** Rows whose spec names an image become import items (after the shard cut over all rows); null when none does. */
async function splitImageRows(
  rows: LocatedRow[],
  specs: Specs,
  dataset: string,
  shard: Shard | undefined,
): Promise<{ recipeRows: LocatedRow[]; images: DatasetImageItem[] } | null> {
  if (![...specs.entries.values()].some((e) => e.image !== undefined)) return null;
  const [{ selectShard }, { lookupSpec }, { imageForRow }, { parseRefName }] = await Promise.all([
    import('../builder/plan-shard.js'),
    import('../dataset/specs.js'),
    import('../image/dataset-images.js'),
    import('../cas/ref-name.js'),
  ]);
  const mine = shard === undefined ? rows : selectShard(rows, shard, (r) => r.row);
  const recipeRows: LocatedRow[] = [];
  const images: DatasetImageItem[] = [];
  for (const r of mine) {
    const spec = lookupSpec(specs, r.row.repo, r.row.version, r.where);
    if (spec.image === undefined) recipeRows.push(r);
    else images.push({ instanceId: r.row.instance_id, source: imageForRow(spec.image, r.row), tag: parseRefName(`${dataset}/${r.row.instance_id}`) });
  }
  return { recipeRows, images };
}

export function registerBuildCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  const cmd = program
    .command('build')
    .description('build a dataset (JSONL/JSON rows + --specs) or one recipe (YAML/JSON) into layers; cached keys are not rebuilt')
    .argument('<dataset-or-recipe>')
    .option('--specs <file>', 'specs mapping (repo, version) to env recipe, test command, log parser (datasets)')
    .option('--repos <dir>', 'where repositories live: <dir>/<owner>/<name> (default: fetch from GitHub)')
    .option('--dataset <name>', 'dataset name for tags (default: from the file name)')
    .option('--jobs <n>', 'nodes built at once', opt.int({ min: 1, max: 256 }), 1)
    .option('--keep-going', 'go on with the rest when a node fails')
    .option('--shard <i/n>', 'build only shard i of n (0-based) of the instances')
    .option('--force', 'rebuild even when a cache key is present')
    .option('--tag <ref>', 'tag for a single recipe build')
    .option('--log-dir <dir>', 'where per-node build logs go (default: <store>/logs/<dataset>)')
    .addOption(option('--timeout <duration>', "limit for one node's build commands", opt.duration(), { value: 7_200_000, shown: '2h' }))
    .option('--platform <os/arch>', 'dataset entries with images: the platform to import (default linux/amd64)')
    .option('--tls-verify <bool>', 'dataset entries with images: false talks plain HTTP to their registry', opt.oneOf(['true', 'false']), 'true')
    .option(
      '--ram-upper <size|auto>',
      'RAM each build sandbox writes into (a tmpfs; a build that outgrows it runs again on disk); auto: half the available memory / jobs; 0: on disk',
      opt.or('auto', opt.size({ min: 0 })),
      'auto',
    );
  addSelectionOptions(cmd).action(async (input: string, o: BuildOpts) => {
    const { PhaseClock } = await import('../builder/phases.js');
    // performance.now() counts from process start: node's boot, module loading, option parsing
    const cli = new PhaseClock();
    cli.add('cli-start', performance.now());
    // inputs are checked before any work: a missing --repos failed only once debootstrap had run
    if (
      o.repos !== undefined &&
      !(await stat(o.repos).then(
        (s) => s.isDirectory(),
        () => false,
      ))
    )
      throw new NotFoundError(`--repos ${o.repos}: no such directory`, 'give the directory holding <owner>/<name> repositories (or mirrors)');
    const ctx = await storeContext(globals());
    const [
      { executePlan },
      { datasetNameFromFile, defaultRepoSource, planCounts, planDataset, planRecipe },
      { parseShard },
      { computeRepoHistories },
      { loadDataset },
      { selectInstances },
      { loadSpecs, lookupSpec },
      { loadRecipeCatalog },
      { reapStale },
    ] = await Promise.all([
      import('../builder/execute.js'),
      import('../builder/plan.js'),
      import('../builder/plan-shard.js'),
      import('../builder/plan-history.js'),
      import('../dataset/read.js'),
      import('../dataset/select.js'),
      import('../dataset/specs.js'),
      import('../recipe/catalog.js'),
      import('../runtime/open.js'),
    ]);
    const tPlan = performance.now();
    const isDataset = /\.(jsonl|json)$/.test(input) && o.specs !== undefined;
    let plan;
    let imageItems: DatasetImageItem[] = [];
    if (isDataset) {
      const specs = await loadSpecs(o.specs!);
      const all = await loadDataset(input);
      let rows = selectInstances(all, await selectionFrom(o), (r) => r.row.instance_id);
      const repoSource = defaultRepoSource(o.repos);
      const dataset = o.dataset ?? datasetNameFromFile(input);
      let shard = o.shard !== undefined ? parseShard(o.shard) : undefined;
      // entries naming images are imported, not planned; the shard is cut over all rows first
      const split = await splitImageRows(rows, specs, dataset, shard);
      const cut = shard;
      if (split !== null) {
        rows = split.recipeRows;
        imageItems = split.images;
        shard = undefined;
      }
      plan = planDataset({
        dataset,
        rows,
        specs,
        repoSource,
        ...(shard !== undefined ? { shard } : {}),
        // From every row built from recipes, not the selection or the shard: the history layer
        // and the instance keys are then the same whichever part of the dataset a run builds.
        histories: await computeRepoHistories(
          all.filter((r) => lookupSpec(specs, r.row.repo, r.row.version, r.where).image === undefined),
          repoSource,
        ),
      });
      // the rows were cut already; the result still names the shard asked for
      if (cut !== undefined) plan.shard = cut;
    } else {
      if (/\.(jsonl)$/.test(input))
        throw new MinisandboxError('USAGE', 'building a dataset needs --specs FILE', { hint: 'minisandbox build DATASET.jsonl --specs specs.yaml' });
      const { catalog, root } = await loadRecipeCatalog(input);
      plan = planRecipe(catalog, root.source, o.tag ?? null);
    }
    // every instance's repository and commit, before the base is built (recipes' files are checked at load)
    const problems = await (await import('../builder/plan-preflight.js')).preflightRepos(plan);
    cli.add('plan', performance.now() - tPlan);
    if (problems.length > 0) {
      const listed = problems.slice(0, 5).map((p) => p.message);
      const more = problems.length > 5 ? `; and ${problems.length - 5} more` : '';
      // with --keep-going the rest is built, and these nodes fail where they would
      if (o.keepGoing === true) for (const m of listed) ctx.out.warn(m);
      else
        throw new InvalidInputError(
          `${problems.length} input problem(s) before any build: ${listed.join('; ')}${more}`,
          'fix them, or pass --keep-going to build the rest',
        );
    }
    const counts = planCounts(plan);
    const logDir = o.logDir ?? join(ctx.store.root, 'logs', plan.dataset === '' ? 'recipes' : plan.dataset);
    ctx.out.progress({
      phase: 'plan',
      ...counts,
      message: `plan: ${counts.base} base, ${counts.env} env, ${counts.history} history, ${counts.instance} instance node(s)`,
    });
    await cli.time('reap-stale', () => reapStale(ctx.store));
    const abort = new AbortController();
    let stoppedBy: NodeJS.Signals | undefined;
    const onSig = (sig: NodeJS.Signals): void => {
      stoppedBy ??= sig;
      abort.abort(new Error(`stopped by ${sig}`));
    };
    process.once('SIGINT', onSig);
    process.once('SIGTERM', onSig);
    let rows: SummaryRow[];
    const view = await buildProgress(ctx.out, plan.nodes.length);
    const tBuild = performance.now();
    try {
      rows = await executePlan(plan, {
        registry: ctx.registry,
        store: ctx.store,
        logDir,
        jobs: o.jobs,
        keepGoing: o.keepGoing === true,
        force: o.force === true,
        timeoutMs: o.timeout,
        ...(o.ramUpper === 'auto' ? {} : { ramUpperBytes: o.ramUpper }),
        signal: abort.signal,
        // a one-node build returns once its layer is published, not after deleting its scratch
        discard: 'detach',
        onEvent: (e) => view.onEvent(e),
      });
    } finally {
      process.off('SIGINT', onSig);
      process.off('SIGTERM', onSig);
      view.stop();
    }
    if (imageItems.length > 0) {
      const tImages = performance.now();
      // without --keep-going, a failed recipe node stops the build: the images are not started
      const stopped = rows.some((r) => r.status === 'failed') && o.keepGoing !== true;
      const imageRows = stopped
        ? imageItems.map((it) => ({
            id: `image:${it.instanceId}`,
            kind: 'image',
            label: it.instanceId,
            status: 'skipped' as const,
            durationMs: 0,
            tag: it.tag,
          }))
        : await (await import('../image/dataset-images.js')).importDatasetImages(ctx.registry, ctx.store, imageItems, {
            parallel: o.jobs,
            keepGoing: o.keepGoing === true,
            force: o.force === true,
            signal: abort.signal,
            ...(o.platform === undefined ? {} : { platform: o.platform }),
            ...(o.tlsVerify === 'false' ? { tlsVerify: false } : {}),
            onDone: (r, done, total) =>
              ctx.out.progress({
                event: 'done',
                node: r.id,
                label: r.label,
                status: r.status,
                durationMs: r.durationMs,
                done,
                total,
                message: `import [${bar(done, total)}] ${done}/${total} ${r.status} ${r.label}`,
              }),
          });
      rows = [...rows, ...imageRows];
      cli.add('images', performance.now() - tImages);
    }
    cli.add('execute', performance.now() - tBuild);
    const tally = { built: 0, cached: 0, failed: 0, interrupted: 0, skipped: 0, cancelled: 0 };
    for (const r of rows) tally[r.status]++;
    ctx.out.result({ dataset: plan.dataset, shard: plan.shard, counts, summary: tally, phasesMs: cli.times, nodes: rows }, () =>
      [
        table([
          ['NODE', 'KIND', 'STATUS', 'TIME', 'TAG / LOG'],
          ...rows.map((r) => [
            r.label,
            r.kind,
            r.status,
            `${(r.durationMs / 1000).toFixed(1)}s`,
            r.status === 'failed' || r.status === 'interrupted' ? `${r.log ?? ''}  ${r.error ?? ''}` : (r.tag ?? r.log ?? ''),
          ]),
        ]),
        '',
        `built ${tally.built}, cached ${tally.cached}, failed ${tally.failed}, skipped ` +
          `${tally.skipped}${tally.cancelled ? `, cancelled ${tally.cancelled}` : ''}` +
          `${tally.interrupted ? `, interrupted ${tally.interrupted} (nothing of them published: the next build builds them)` : ''}`,
      ].join('\n'),
    );
    if (tally.failed + tally.interrupted + tally.skipped + tally.cancelled > 0) setExit(EXIT.failed);
    // stopped by a signal: the status a shell gives (130 for Ctrl-C, 143 for TERM)
    if (stoppedBy !== undefined) setExit(128 + (stoppedBy === 'SIGINT' ? 2 : 15));
  });
}

function bar(done: number, total: number, width = 20): string {
  const n = total === 0 ? width : Math.round((done / total) * width);
  return `${'#'.repeat(n)}${'.'.repeat(width - n)}`;
}

/**
 * A build's progress: one view (progress.ts) of the nodes running, each with its phase, time and
 * log, and the bytes their layers' captures have read; a line for each node that ends (JSON: an
 * event), so a file of plain progress tells what happened in what order.
 */
async function buildProgress(out: Output, total: number): Promise<{ onEvent: (e: BuildEvent) => void; stop: () => void }> {
  const { ProgressView, clockText } = await import('./progress.js');
  const running = new Map<string, { label: string; kind: string; phase: string; t0: number; log: string; capturedBytes?: number }>();
  let done = 0;
  const view = new ProgressView(out, 'build', {
    phase: 'build',
    itemsDone: 0,
    itemsTotal: total,
    unit: 'nodes',
    subject: () => [...running.values()].map((r) => `${r.kind} ${r.label} (${r.phase} ${clockText(performance.now() - r.t0)})`).join(', '),
    fields: () => ({
      running: [...running.values()].map((r) => ({
        kind: r.kind,
        label: r.label,
        phase: r.phase,
        elapsedMs: Math.round(performance.now() - r.t0),
        log: r.log,
        ...(r.capturedBytes === undefined ? {} : { capturedBytes: r.capturedBytes }),
      })),
    }),
  });
  const refresh = (): void => {
    const first = running.values().next().value;
    const captured = [...running.values()].filter((r) => r.capturedBytes !== undefined);
    view.set({
      // the first running node's phase: a plain line comes when it changes (and every few seconds)
      phase: first?.phase ?? 'build',
      itemsDone: done,
      ...(first === undefined ? {} : { log: first.log }),
      doneBytes: captured.length > 0 ? captured.reduce((n, r) => n + (r.capturedBytes ?? 0), 0) : undefined,
      bytesVerb: 'captured',
    });
  };
  return {
    onEvent: (e) => {
      const r = running.get(e.node.id);
      if (e.type === 'start') running.set(e.node.id, { label: e.node.label, kind: e.node.kind, phase: 'start', t0: performance.now(), log: e.log });
      else if (e.type === 'phase' && r !== undefined) r.phase = e.phase;
      else if (e.type === 'wait' && r !== undefined) r.phase = `waiting for the build of pid ${e.holder ?? '?'}`;
      else if (e.type === 'captured' && r !== undefined) r.capturedBytes = e.bytes;
      else if (e.type === 'retry') out.warn(`build: retrying ${e.node.label} (attempt ${e.attempt + 1}): ${e.error}`);
      else if (e.type === 'done') {
        running.delete(e.node.id);
        done = e.done;
        const row = e.row;
        const text =
          `build [${bar(e.done, e.total)}] ${e.done}/${e.total} ${row.status} ${e.node.kind} ${e.node.label} in ${clockText(row.durationMs)}` +
          `${row.status === 'failed' || row.status === 'interrupted' ? `: ${row.error ?? ''} (log ${row.log ?? ''})` : ''}`;
        if (out.progressMode === 'json')
          out.event({
            event: 'done',
            node: e.node.id,
            kind: e.node.kind,
            label: e.node.label,
            status: row.status,
            durationMs: row.durationMs,
            ...(row.log ? { log: row.log } : {}),
            itemsDone: e.done,
            itemsTotal: e.total,
            message: text,
          });
        else if (out.progressMode === 'plain') {
          out.done();
          out.line(text);
        }
      }
      refresh();
    },
    stop: () => view.stop(),
  };
}
