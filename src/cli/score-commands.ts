/**
 * `score` and `validate`: SWE-bench grading in fresh sandboxes of each instance's environment.
 * What they need is imported inside the actions (start-up: see main.ts).
 */
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { NotFoundError } from '../errors.js';
import type { Prediction } from '../score/predictions.js';
import type { ScoreInstance } from '../score/instance.js';
import { type GlobalOptions, checkDirOption, storeContext } from './context.js';
import { opt, option } from './options.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';
import { EXIT } from './output.js';

type Globals = () => GlobalOptions;

interface Common extends SelectionFlags {
  specs: string;
  dataset?: string;
  jobs: number;
  /** Milliseconds. */
  timeout: number;
  memory?: number;
}

async function prepare(datasetFile: string, o: Common, globals: Globals) {
  const ctx = await storeContext(globals());
  const [{ datasetNameFromFile }, { loadDataset }, { loadSpecs, lookupSpec }, { refEvalRunner }, { reapStale }, { evalSpecFromDataset }, { resolveEnvDigest }] =
    await Promise.all([
      import('../builder/plan.js'),
      import('../dataset/read.js'),
      import('../dataset/specs.js'),
      import('../runtime/eval-runner.js'),
      import('../runtime/open.js'),
      import('../score/dataset-spec.js'),
      import('../registry/resolve-env.js'),
    ]);
  const specs = await loadSpecs(o.specs);
  const { selectInstances } = await import('../dataset/select.js');
  const located = selectInstances(await loadDataset(datasetFile), await selectionFrom(o), (r) => r.row.instance_id);
  const rows = located.map((r) => r.row);
  const where = new Map(located.map((r) => [r.row.instance_id, r.where]));
  const dataset = o.dataset ?? datasetNameFromFile(datasetFile);
  const specLookup = (x: ScoreInstance) => evalSpecFromDataset(lookupSpec(specs, x.repo, x.version, where.get(x.instance_id) ?? x.instance_id));
  const refOf = (x: ScoreInstance) => `${dataset}/${x.instance_id}`;
  const runnerFactory = (x: ScoreInstance) => refEvalRunner(ctx.registry, ctx.store, refOf(x), o.memory !== undefined ? { memoryBytes: o.memory } : {});
  // the environment's digest: resolved for every instance before grading, and a part of what a result is reused for
  const environmentOf = (x: ScoreInstance) => resolveEnvDigest(ctx.registry, refOf(x));
  await reapStale(ctx.store);
  return { ctx, rows, specLookup, runnerFactory, environmentOf, jobs: o.jobs, timeoutS: o.timeout / 1000, dataset };
}

export function registerScoreCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  const score = program
    .command('score')
    .description("grade predictions as the SWE-bench harness does, each in a fresh sandbox of the instance's environment (network off)")
    .argument('<dataset>', 'SWE-bench JSONL/JSON rows (tags are <dataset>/<instance_id>)')
    .requiredOption(
      '--predictions <file|gold>',
      "predictions JSONL/JSON (instance_id, model_patch, model_name_or_path), or `gold` for the dataset's own patches",
    )
    .requiredOption('--specs <file>', 'specs file (test command and log parser per repo/version)')
    .option('--dataset <name>', 'dataset name used in tags (default: from the file name)')
    .option('--jobs <n>', 'instances graded at once', opt.int({ min: 1, max: 1024 }), 1)
    .option('--run-id <id>', 'run id for the report paths', 'minisandbox')
    .addOption(
      option('--timeout <duration>', "limit for one instance's eval script (plain numbers are seconds)", opt.duration({ min: 1000 }), {
        value: 1_800_000,
        shown: '30m',
      }),
    )
    .option('--report-dir <dir>', 'where reports go', 'logs/run_evaluation')
    .option('--memory <size>', 'memory limit per eval sandbox', opt.size({ min: 1024 ** 2 }))
    .option('--force', 'grade again the instances this run id already has results for');
  addSelectionOptions(score).action(async (datasetFile: string, o: Common & { predictions: string; runId: string; reportDir: string; force?: boolean }) => {
    checkDirOption('--report-dir', o.reportDir);
    // read before any sandbox work: a missing file is exit 3 with its name, not an ENOENT later
    const predictionsText =
      o.predictions === 'gold'
        ? null
        : await readFile(o.predictions, 'utf8').catch((e: unknown) => {
            if ((e as { code?: unknown }).code === 'ENOENT')
              throw new NotFoundError(`predictions file ${o.predictions}`, 'give a JSONL/JSON predictions file, or --predictions gold');
            throw e;
          });
    const { ctx, rows, specLookup, runnerFactory, environmentOf, jobs, timeoutS } = await prepare(datasetFile, o, globals);
    const [{ parsePredictions }, { scoreRun }, { formatFailure }] = await Promise.all([
      import('../score/predictions.js'),
      import('../score/score-run.js'),
      import('../score/diagnose.js'),
    ]);
    const all: Prediction[] =
      predictionsText === null
        ? rows.map((r) => ({ instance_id: r.instance_id, model_patch: r.patch, model_name_or_path: 'gold' }))
        : parsePredictions(predictionsText, o.predictions);
    // With a selection, predictions of other instances are not part of this run.
    const selected = new Set(rows.map((r) => r.instance_id));
    const predictions =
      o.instances !== undefined || o.instancesFile !== undefined || o.instancesRegex !== undefined ? all.filter((p) => selected.has(p.instance_id)) : all;
    let done = 0;
    const total = predictions.length;
    // Ctrl-C or TERM: evaluations in flight are killed with their sandboxes; a rerun resumes
    const abort = new AbortController();
    const stop = (): void => abort.abort(new Error('interrupted'));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    const r = await scoreRun(rows, predictions, specLookup, runnerFactory, {
      jobs,
      runId: o.runId,
      reportDir: resolve(o.reportDir),
      timeoutS,
      signal: abort.signal,
      force: o.force === true,
      environmentOf,
      onResult: (res, regraded) => {
        done++;
        ctx.out.progress({
          instance: res.instance_id,
          status: res.status,
          resolved: res.resolved,
          done,
          total,
          ...(regraded === null ? {} : { regraded: regraded.changed }),
          message:
            `score ${done}/${total}: ${res.instance_id} ${res.resolved ? 'resolved' : res.status}` +
            (regraded === null ? '' : ` (regraded: ${regraded.reason})`),
        });
      },
    }).finally(() => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
    });
    const s = r.summary;
    const otherSpelling = r.results.reduce((n, x) => n + (x.other_spelling?.length ?? 0), 0);
    const regraded = new Map(r.regraded.map((x) => [x.instance_id, x.reason]));
    if (r.reused.length > 0)
      ctx.out.progress({ reused: r.reused, runId: o.runId, message: `score: ${r.reused.length} reused from run ${o.runId}; --force to rerun` });
    ctx.out.result(
      {
        summaryPath: r.summaryPath,
        summary: s,
        reused: r.reused,
        regraded: r.regraded,
        failures: r.failures,
        otherSpellingNames: otherSpelling,
        results: r.results,
      },
      () =>
        [
          ...r.results.map((x) => {
            const why = regraded.get(x.instance_id);
            const verdict = x.resolved ? 'RESOLVED' : x.status === 'completed' ? 'unresolved' : x.status;
            return `${x.instance_id}: ${verdict}${why === undefined ? '' : ` (regraded: ${why})`}`;
          }),
          ...(r.failures.length > 0 ? ['', 'not resolved:', ...r.failures.map((f) => formatFailure(f))] : []),
          '',
          `total ${s.total_instances}, submitted ${s.submitted_instances}, completed ${s.completed_instances}, resolved ` +
            `${s.resolved_instances}, unresolved ${s.unresolved_instances}, empty patch ${s.empty_patch_instances}, error ${s.error_instances}`,
          ...(otherSpelling > 0
            ? [`${otherSpelling} test name(s) matched by the other unittest spelling (Python <= 3.10 vs >= 3.11; result.json other_spelling)`]
            : []),
          ...(r.reused.length > 0 ? [`${r.reused.length} reused from run ${o.runId}; --force to rerun`] : []),
          `report: ${r.summaryPath}`,
        ].join('\n'),
    );
    if (s.error_instances > 0) setExit(EXIT.failed);
  });

  const validate = program
    .command('validate')
    .description('check every instance: the gold patch resolves and the empty patch does not, on every run; lists failures and flaky instances')
    .argument('<dataset>')
    .requiredOption('--specs <file>', 'specs file')
    .option('--dataset <name>', 'dataset name used in tags (default: from the file name)')
    .option('--runs <n>', 'runs per instance and patch', opt.int({ min: 1, max: 1000 }), 1)
    .option('--jobs <n>', 'evaluations at once', opt.int({ min: 1, max: 1024 }), 1)
    .addOption(
      option('--timeout <duration>', 'limit for one eval script (plain numbers are seconds)', opt.duration({ min: 1000 }), { value: 1_800_000, shown: '30m' }),
    )
    .option('--memory <size>', 'memory limit per eval sandbox', opt.size({ min: 1024 ** 2 }))
    .option('--log-dir <dir>', "where each run's eval log goes (default: logs/validate/<dataset>)");
  addSelectionOptions(validate).action(async (datasetFile: string, o: Common & { runs: number; logDir?: string }) => {
    const { ctx, rows, specLookup, runnerFactory, jobs, timeoutS, dataset } = await prepare(datasetFile, o, globals);
    const [{ validateInstances }, { formatFailure }] = await Promise.all([import('../score/validate.js'), import('../score/diagnose.js')]);
    const runs = o.runs;
    let done = 0;
    const total = rows.length * 2 * runs;
    const report = await validateInstances(rows, specLookup, runnerFactory, {
      runs,
      jobs,
      timeoutS,
      logDir: resolve(o.logDir ?? join('logs', 'validate', dataset)),
      onObservation: (x) => {
        done++;
        ctx.out.progress({
          instance: x.instance_id,
          kind: x.kind,
          run: x.run,
          resolved: x.result.resolved,
          done,
          total,
          message: `validate ${done}/${total}: ${x.instance_id} ${x.kind} run ${x.run + 1}: ${x.result.resolved ? 'resolved' : x.result.status}`,
        });
      },
    });
    const bad = report.gold_unresolved_ids.length + report.empty_resolved_ids.length + report.error_ids.length + report.flaky.length;
    ctx.out.result(report, () =>
      [
        `${report.total_instances} instance(s), ${runs} run(s): ${report.ok_ids.length} ok`,
        report.gold_unresolved_ids.length ? `gold patch does not resolve: ${report.gold_unresolved_ids.join(', ')}` : '',
        report.empty_resolved_ids.length ? `empty patch resolves (tests do not test the fix): ${report.empty_resolved_ids.join(', ')}` : '',
        report.error_ids.length ? `could not be graded: ${report.error_ids.join(', ')}` : '',
        ...report.flaky.map((f) => `flaky: ${f.instance_id} (${f.kind}): ${f.outcomes.join(', ')}${f.tests.length ? `; tests ${f.tests.join(', ')}` : ''}`),
      ]
        .filter((l) => l !== '')
        .concat(report.failures.length > 0 ? ['', ...report.failures.map((f) => formatFailure(f))] : [])
        .join('\n'),
    );
    if (bad > 0) setExit(EXIT.failed);
  });
}
