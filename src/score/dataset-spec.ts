/**
 * From the dataset's resolved spec (src/dataset/specs.ts, SWE-bench's MAP_REPO_VERSION_TO_SPECS)
 * to the eval spec scoring runs with.
 */
import type { ResolvedSpec } from '../dataset/specs.js';
import { shellQuote } from './shell-quote.js';
import type { EvalSpecInput } from './spec.js';

export function evalSpecFromDataset(
  spec: Pick<ResolvedSpec, 'repo' | 'testCmd' | 'logParser' | 'workdir' | 'evalEnv'> & { preTest?: string[] },
): EvalSpecInput {
  return {
    testCmd: spec.testCmd,
    parser: spec.logParser,
    workdir: spec.workdir,
    // The harness turns Django's test files into dotted modules; every other runner takes paths.
    directives: spec.repo === 'django/django' ? 'django' : 'files',
    // the spec's own commands (a conda activate, as SWE-bench images need) after its variables
    preCommands: [...Object.entries(spec.evalEnv).map(([k, v]) => `export ${k}=${shellQuote(v)}`), ...(spec.preTest ?? [])],
  };
}
