/** `score` and `validate`: SWE-bench grading in fresh sandboxes of each instance's environment. */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { datasetNameFromFile } from '../build/plan.js';
import { loadDataset } from '../dataset/read.js';
import { loadSpecs, lookupSpec } from '../dataset/specs.js';
import { InvalidInputError } from '../errors.js';
import { sandboxEvalRunner } from '../runtime/eval-runner.js';
import { reapStale } from '../runtime/open.js';
import { evalSpecFromDataset } from '../score/dataset-spec.js';
import { type Prediction, parsePredictions } from '../score/predictions.js';
import { scoreRun } from '../score/score-run.js';
import type { ScoreInstance } from '../score/instance.js';
import { validateInstances } from '../score/validate.js';
import { type GlobalOptions, storeContext, parseSize } from './context.js';
import { EXIT } from './output.js';

type Globals = () => GlobalOptions;

interface Common {
  specs: string;
  dataset?: string;
  jobs: string;
  timeout: string;
  memory?: string;
}

async function prepare(datasetFile: string, o: Common, globals: Globals) {
  const ctx = await storeContext(globals());
  const specs = await loadSpecs(o.specs);
  const located = await loadDataset(datasetFile);
  const rows = located.map((r) => r.row);
  const where = new Map(located.map((r) => [r.row.instance_id, r.where]));
  const dataset = o.dataset ?? datasetNameFromFile(datasetFile);
  const specLookup = (x: ScoreInstance) => evalSpecFromDataset(lookupSpec(specs, x.repo, x.version, where.get(x.instance_id) ?? x.instance_id));
  const runnerFactory = (x: ScoreInstance) =>
    sandboxEvalRunner(ctx.registry, ctx.store, `${dataset}/${x.instance_id}`, o.memory !== undefined ? { memoryBytes: parseSize(o.memory) } : {});
  await reapStale(ctx.store);
  const jobs = Math.max(1, Number.parseInt(o.jobs, 10) || 1);
  const timeoutS = Number(o.timeout);
  if (!(timeoutS > 0)) throw new InvalidInputError(`--timeout must be a positive number of seconds, not ${o.timeout}`);
  return { ctx, rows, specLookup, runnerFactory, jobs, timeoutS };
}

export function registerScoreCommands(program: Command, globals: Globals, setExit: (code: number) => void): void {
  program
    .command('score')
    .description("grade predictions as the SWE-bench harness does, each in a fresh sandbox of the instance's environment (network off)")
    .argument('<dataset>', 'SWE-bench JSONL/JSON rows (tags are <dataset>/<instance_id>)')
    .requiredOption('--predictions <file|gold>', 'predictions JSONL/JSON (instance_id, model_patch, model_name_or_path), or `gold` for the dataset\'s own patches')
    .requiredOption('--specs <file>', 'specs file (test command and log parser per repo/version)')
    .option('--dataset <name>', 'dataset name used in tags (default: from the file name)')
    .option('--jobs <n>', 'instances graded at once', '1')
    .option('--run-id <id>', 'run id for the report paths', 'minisandbox')
    .option('--timeout <seconds>', 'limit for one instance\'s eval script', '1800')
    .option('--report-dir <dir>', 'where reports go', 'logs/run_evaluation')
    .option('--memory <size>', 'memory limit per eval sandbox')
    .action(async (datasetFile: string, o: Common & { predictions: string; runId: string; reportDir: string }) => {
      const { ctx, rows, specLookup, runnerFactory, jobs, timeoutS } = await prepare(datasetFile, o, globals);
      const predictions: Prediction[] =
        o.predictions === 'gold'
          ? rows.map((r) => ({ instance_id: r.instance_id, model_patch: r.patch, model_name_or_path: 'gold' }))
          : parsePredictions(await readFile(o.predictions, 'utf8'), o.predictions);
      let done = 0;
      const total = predictions.length;
      const r = await scoreRun(rows, predictions, specLookup, runnerFactory, {
        jobs,
        runId: o.runId,
        reportDir: resolve(o.reportDir),
        timeoutS,
        onResult: (res) => {
          done++;
          ctx.out.progress({ instance: res.instance_id, status: res.status, resolved: res.resolved, done, total, message: `score ${done}/${total}: ${res.instance_id} ${res.resolved ? 'resolved' : res.status}` });
        },
      });
      const s = r.summary;
      ctx.out.result({ summaryPath: r.summaryPath, summary: s, results: r.results }, () =>
        [
          ...r.results.map((x) => `${x.instance_id}: ${x.resolved ? 'RESOLVED' : x.status === 'completed' ? 'unresolved' : x.status}`),
          '',
          `total ${s.total_instances}, submitted ${s.submitted_instances}, completed ${s.completed_instances}, resolved ${s.resolved_instances}, unresolved ${s.unresolved_instances}, empty patch ${s.empty_patch_instances}, error ${s.error_instances}`,
          `report: ${r.summaryPath}`,
        ].join('\n'),
      );
      if (s.error_instances > 0) setExit(EXIT.failed);
    });

  program
    .command('validate')
    .description('check every instance: the gold patch resolves and the empty patch does not, on every run; lists failures and flaky instances')
    .argument('<dataset>')
    .requiredOption('--specs <file>', 'specs file')
    .option('--dataset <name>', 'dataset name used in tags (default: from the file name)')
    .option('--runs <n>', 'runs per instance and patch', '1')
    .option('--jobs <n>', 'evaluations at once', '1')
    .option('--timeout <seconds>', 'limit for one eval script', '1800')
    .option('--memory <size>', 'memory limit per eval sandbox')
    .action(async (datasetFile: string, o: Common & { runs: string }) => {
      const { ctx, rows, specLookup, runnerFactory, jobs, timeoutS } = await prepare(datasetFile, o, globals);
      const runs = Math.max(1, Number.parseInt(o.runs, 10) || 1);
      let done = 0;
      const total = rows.length * 2 * runs;
      const report = await validateInstances(rows, specLookup, runnerFactory, {
        runs,
        jobs,
        timeoutS,
        onObservation: (x) => {
          done++;
          ctx.out.progress({ instance: x.instance_id, kind: x.kind, run: x.run, resolved: x.result.resolved, done, total, message: `validate ${done}/${total}: ${x.instance_id} ${x.kind} run ${x.run + 1}: ${x.result.resolved ? 'resolved' : x.result.status}` });
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
        ].filter((l) => l !== '').join('\n'),
      );
      if (bad > 0) setExit(EXIT.failed);
    });
}
