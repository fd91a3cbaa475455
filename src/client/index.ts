/**
 * The client of `minisandbox serve` (`minisandbox/client`): `Client` for one node, `Pool` over many,
 * the handles they give (`RemoteSandbox`, `RemoteSession`, `RemoteJob`) and their typed errors.
 */
export { Client, RemoteSandbox, RemoteSession, RemoteJob } from './client.js';
export type {
  ClientOptions,
  CreateOptions,
  RemoteExecOptions,
  Limits,
  ForkChild,
  SandboxInfo,
  ExecResult,
  Capacity,
  Health,
  Holds,
  PrefetchStatus,
  JobInfo,
  SnapshotInfo,
  DirListing,
  PrewarmResults,
  EvaluationAnswer,
} from './client.js';
export { Pool, placementOrder, resolveNodes } from './pool.js';
export type { PoolOptions, PoolCreateOptions, NodeStatus } from './pool.js';
export {
  RemoteError,
  RemoteNotFoundError,
  RemoteInvalidInputError,
  MalformedBodyError,
  UnauthorizedError,
  BodyTooLargeError,
  CapacityError,
  GoneError,
  RemoteServerError,
  NotConfiguredError,
  TransportError,
  NodeLostError,
  nodeOf,
} from './errors.js';
export type { NodeLostReason, RemoteErrorInit } from './errors.js';
