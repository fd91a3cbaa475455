/**
 * minisandbox as a library: `import { openRegistry, StorePaths, openSandbox, scoreInstance } from 'minisandbox'`.
 * The subpaths (`minisandbox/runtime`, `/registry`, `/store`, `/score`, `/errors`, `/client`) hold
 * the same names, grouped; nothing else of the package is public (package.json `exports`).
 */
export * from './errors.js';
export * from './registry/index.js';
export * from './store/index.js';
export * from './runtime/index.js';
export * from './score/index.js';
// the client of `serve`: Client, Pool, RemoteSandbox, RemoteSession, RemoteJob and their errors
export * from './client/index.js';
// a root for environments without a distribution: busybox's applets (examples/, tests, quick starts)
export { populateBusyboxRoot } from './recipe/base-rootfs.js';
