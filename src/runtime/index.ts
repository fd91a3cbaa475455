/**
 * Public surface of the runtime (`minisandbox/runtime`): from an environment ref to a running
 * sandbox (pulled, leased, started), its commands, sessions, files, forks, resets and snapshots, and the EvalRunner
 * that grades in fresh sandboxes of a ref.
 */
export { openSandbox, runOnce, forkLeased, forkShared, resetLeased, reapStale, hostIdShift } from './open.js';
export type { OpenOptions, RunOnceOptions } from './open.js';
export { Snapshots, SnapshotInUseError, SnapshotRecordSchema, snapshotRef } from './snapshot.js';
export type { SnapshotRecord, SnapshotLayout } from './snapshot.js';
export { captureShellState, restoreShellState } from '../sandbox/shell-state.js';
export type { ShellState } from '../sandbox/shell-state.js';
export { refEvalRunner } from './eval-runner.js';
export type { EvalSandboxOptions } from './eval-runner.js';
export { attach } from './shell.js';
export {
  Sandbox,
  SandboxStartError,
  SandboxLimitsSchema,
  Session,
  CommandOutcomeSchema,
  CommandStatusSchema,
  DEFAULT_MAX_OUTPUT_BYTES,
  probeHost,
  listSandboxes,
} from '../sandbox/index.js';
export type {
  SandboxLimits,
  ExecOptions,
  SessionOptions,
  SessionRunOptions,
  CommandOutcome,
  CommandStatus,
  HostInfo,
  SandboxListing,
  ForkResult,
  SandboxOrigin,
} from '../sandbox/index.js';
