/** The sandbox runtime: rootless namespace sandboxes over read-only overlayfs layers. */
export {
  createSandbox,
  forkSandbox,
  forkSandboxShared,
  Sandbox,
  SandboxStartError,
  SandboxOptionsSchema,
  SandboxLimitsSchema,
} from './sandbox.js';
export type { ForkResult, SandboxOrigin } from './sandbox.js';
export type { SandboxOptions, SandboxLimits, CreateHooks, ExecOptions } from './sandbox.js';
export { runOnce } from './run-once.js';
export type { RunOnceOptions } from './run-once.js';
export { Session, ansiQuote, commandScript } from './session.js';
export type { SessionOptions, SessionRunOptions } from './session.js';
export { CommandOutcomeSchema, CommandStatusSchema, DEFAULT_MAX_OUTPUT_BYTES } from './outcome.js';
export type { CommandOutcome, CommandStatus } from './outcome.js';
export { listSandboxes, reapStaleSandboxes, readState, SandboxStateSchema } from './state.js';
export type { SandboxState, SandboxListing } from './state.js';
export { probeHost, findExecutable } from './host.js';
export type { HostInfo, HostTools } from './host.js';
export { ensureSubidRange, resolveIdMap, parseSubidFile, findSubidRange, IdMapSchema, DEFAULT_ID_COUNT } from '../host/subid.js';
export type { IdMap, SubidEntry } from '../host/subid.js';
export { createSandboxCgroup, parseProcCgroup } from './cgroup.js';
export type { CgroupLimits, SandboxCgroup } from './cgroup.js';
export { makeBusyboxRootfs, ensureDebianRootfs, shiftCopyTree, shiftOwners } from './rootfs.js';
export { DEFAULT_CAPS, WORKDIR_FAILURE } from './commands.js';
export type { EnterSpec, HolderSpec, Rlimits } from './commands.js';
