/**
 * The process event emitted right before this process replaces itself (util/exec-in-place.ts):
 * node's `exit` never comes then, and what a listener would have done at exit (the CLI's code
 * cache, bundle-loader.ts) is done on this one instead.
 */
export const BEFORE_EXEC = 'minisandbox:before-exec';
