/**
 * How one instance is evaluated: the test command, the log parser that reads its output, where the
 * repository lives and how the harness appends test directives. The dataset's specs file maps
 * (repo, version) to one of these.
 */
import { z } from 'zod';

export const EvalSpecSchema = z.object({
  /** Run from the workdir; test directives (if any) are appended, space-separated. */
  testCmd: z.string().min(1),
  /** A name from the parser registry (parsers/registry.ts). */
  parser: z.string().min(1),
  workdir: z.string().startsWith('/').default('/testbed'),
  /**
   * `files`: the test patch's non-data files are appended (the harness's Python runners);
   * `django`: as dotted modules relative to tests/; `none`: the command names its own tests (the
   * harness appends nothing for any other language).
   */
  directives: z.enum(['none', 'files', 'django']).default('files'),
  /** Run after `cd workdir` and before anything else, e.g. activating a virtualenv (the harness's eval_commands). */
  preCommands: z.array(z.string()).default([]),
  /**
   * Run after the test patch is applied and before the test command, outside the test output
   * markers: the harness's `build` (e.g. `make`, `cmake --build build`), which compiled
   * languages need so the tests see the patched sources.
   */
  build: z.array(z.string()).default([]),
});
export type EvalSpec = z.output<typeof EvalSpecSchema>;
export type EvalSpecInput = z.input<typeof EvalSpecSchema>;
