/**
 * Public surface of the store (`minisandbox/store`): a node's local cache of verified objects and
 * laid-out layers, and the publishing path from a directory tree to a registry.
 */
export { StorePaths, defaultStoreDir } from './paths.js';
export { pullEnv } from './pull.js';
export type { PullOptions, PulledEnv } from './pull.js';
export { prefetch } from './prefetch.js';
export type { PrefetchResult } from './prefetch.js';
export { pushTree } from '../publish/push.js';
export type { PushOptions, PushResult } from '../publish/push.js';
export { exportEnv } from './export.js';
export { gcStore } from './gc.js';
export type { StoreGcResult } from './gc.js';
export { verifyRegistry, verifyStore } from './verify.js';
export type { Problem, VerifyReport } from './verify.js';
export { audit, AuditReportSchema } from '../audit/audit.js';
export type { AuditReport } from '../audit/audit.js';
