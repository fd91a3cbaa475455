/**
 * From the dataset's resolved spec (src/dataset/specs.ts, SWE-bench's MAP_REPO_VERSION_TO_SPECS)
 * to the eval spec scoring runs with.
 */
import type { ResolvedSpec } from '../dataset/specs.js';
import { parserLanguage } from './parsers/registry.js';
import { shellQuote } from './shell-quote.js';
import type { DirectiveStyle } from './diff-files.js';
import type { EvalSpecInput } from './spec.js';

/**
 * The harness appends the test patch's files to Python test commands only (Django's as dotted
 * modules); a multilingual spec's command names its own tests (`make check`, `go test -run ...`).
 * The parser tells the language: every harness repository's parser is of its own language.
 */
function directivesFor(repo: string, logParser: string): DirectiveStyle {
  if (repo === 'django/django') return 'django';
  return parserLanguage(logParser) === 'python' ? 'files' : 'none';
}

export function evalSpecFromDataset(
  spec: Pick<ResolvedSpec, 'repo' | 'testCmd' | 'logParser' | 'workdir' | 'evalEnv'> & { preTest?: string[]; build?: string[] },
): EvalSpecInput {
  return {
    testCmd: spec.testCmd,
    parser: spec.logParser,
    workdir: spec.workdir,
    directives: directivesFor(spec.repo, spec.logParser),
    build: spec.build ?? [],
    // the spec's own commands (a conda activate, as SWE-bench images need) after its variables
    preCommands: [...Object.entries(spec.evalEnv).map(([k, v]) => `export ${k}=${shellQuote(v)}`), ...(spec.preTest ?? [])],
  };
}
