/**
 * Public surface of the registry (`minisandbox/registry`): where blobs and refs live, a directory
 * or an S3 prefix behind one interface, and what moves or removes them.
 */
export { openRegistry } from './open.js';
export type { Registry, BlobStat } from './registry.js';
export { parseRefName, RefNameSchema } from '../cas/ref-name.js';
export { LocalRegistry } from './local.js';
export { S3Registry } from './s3.js';
export type { S3RegistryOptions } from './s3.js';
export { copyRefs, parseCopyRefs } from './copy.js';
export type { CopyOptions, CopyProgress, CopySummary } from './copy.js';
export { gcRegistry } from './gc.js';
export type { RegistryGcResult } from './gc.js';
// an environment's config as a registry holds it (resolveEnv reads one by ref or digest)
export { resolveEnv } from './resolve-env.js';
export { EnvConfigSchema, LayerRefSchema, PackRefSchema, RuntimeConfigSchema, ENV_MEDIA_TYPE } from '../layer/env.js';
export type { EnvConfig, LayerRef, PackRef, RuntimeConfig } from '../layer/env.js';
