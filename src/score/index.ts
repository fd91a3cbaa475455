/**
 * Scoring, SWE-bench compatible. The reward API is `scoreInstance`; `scoreRun` and
 * `validateInstances` grade whole prediction files and datasets. Everything but the injected
 * EvalRunner (and scoreRun's report files) is pure.
 */
export { scoreInstance, parseEvalSpec } from './score-instance.js';
export type { ScoreInstanceOptions, ScoreOutcome } from './score-instance.js';
export { scoreRun, modelDirName, safeComponent } from './score-run.js';
export type { FilesDir, RunnerFactory, ScoreRunOptions, ScoreRunOutcome, SpecLookup } from './score-run.js';
export { evaluatePrediction } from './evaluate.js';
export type { EvaluateOptions, EvaluateOutcome } from './evaluate.js';
export { recordInRunSummary, summaryWith } from './run-summary-update.js';
export { validateInstances, validateResults, ValidationReportSchema } from './validate.js';
export type { ValidateOptions, ValidationObservation, ValidationReport } from './validate.js';
export type { EvalFile, EvalRunner, EvalRunResult, EvalRunStatus } from './runner.js';
export { hostEvalRunner } from './host-runner.js';
export { sandboxEvalRunner, asEvalSandbox } from './sandbox-runner.js';
export type { EvalSandbox, SandboxRunnerOptions } from './sandbox-runner.js';
export { EvalSpecSchema } from './spec.js';
export type { EvalSpec, EvalSpecInput } from './spec.js';
export { evalSpecFromDataset } from './dataset-spec.js';
export { ScoreInstanceSchema, parseScoreInstance } from './instance.js';
export type { ScoreInstance, ScoreInstanceInput } from './instance.js';
export { PredictionSchema, parsePredictions } from './predictions.js';
export type { Prediction } from './predictions.js';
export {
  EvaluationStatusSchema,
  InstanceReportSchema,
  ReportFileSchema,
  RunSummarySchema,
  ScoreResultSchema,
  ScoreStatusSchema,
  makeRunSummary,
} from './report.js';
export type { EvaluationStatus, InstanceReport, ReportFile, RunSummary, ScoreResult, ScoreStatus } from './report.js';
export { VerdictInputsSchema, verdictInputs } from './verdict-inputs.js';
export type { Regrade, VerdictInput, VerdictInputs } from './verdict-inputs.js';
export { gradeTests, resolutionStatus, TestsStatusSchema } from './grading.js';
export type { TestsStatus } from './grading.js';
export { defaultParser, getParser, PARSER_NAMES, parserLanguage, parserName, REPO_PARSERS, REPO_VERSION_PARSERS } from './parsers/registry.js';
export type { LogParser, ParserLanguage } from './parsers/registry.js';
export { TestStatusSchema } from './status.js';
export type { StatusMap, TestStatus } from './status.js';
export { makeEvalScript } from './eval-script.js';
export { analyzeLog } from './log-analysis.js';
