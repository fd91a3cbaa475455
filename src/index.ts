/**
 * minisandbox as a library: `import { openRegistry, StorePaths, openSandbox, scoreInstance } from 'minisandbox'`.
 * The subpaths (`minisandbox/runtime`, `/registry`, `/store`, `/score`, `/errors`) hold the same
 * names, grouped; nothing else of the package is public (package.json `exports`).
 */
export * from './errors.js';
export * from './registry/index.js';
export * from './store/index.js';
export * from './runtime/index.js';
export * from './score/index.js';
