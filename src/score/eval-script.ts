/**
 * The eval script: a pure function of the instance, its spec and where the runner put the patch
 * files. It reproduces the SWE-bench harness's semantics in one bash run: apply the model patch
 * with the harness's fallback chain, reset the test files to the base commit, apply the test
 * patch, run the test command between the start/end markers, reset the test files again.
 * `set -x` traces every command into the same merged stream, which is how the markers (written as
 * `: '<marker>'` no-ops) reach the log.
 */
import { modifiedFiles, testDirectives } from './diff-files.js';
import type { ScoreInstance } from './instance.js';
import { APPLY_PATCH_FAIL, APPLY_PATCH_PASS, END_TEST_OUTPUT, GIT_APPLY_CMDS, START_TEST_OUTPUT } from './markers.js';
import { shellQuote } from './shell-quote.js';
import type { EvalSpec } from './spec.js';

export interface EvalScriptInput {
  instance: Pick<ScoreInstance, 'base_commit' | 'test_patch'>;
  spec: EvalSpec;
  /** Where the runner writes the model patch; null when there is no patch to apply. */
  patchPath: string | null;
  /** Where the runner writes the test patch. */
  testPatchPath: string;
}

const GIT_GUARD: [string, string][] = [
  ['safe.directory', '*'],
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
];
const GIT_GUARD_ON =
  `export GIT_CONFIG_COUNT=${GIT_GUARD.length} ` +
  `${GIT_GUARD.map(([k, v], i) => `GIT_CONFIG_KEY_${i}=${k} GIT_CONFIG_VALUE_${i}=${shellQuote(v)}`).join(' ')}`;
const GIT_GUARD_OFF = `unset GIT_CONFIG_COUNT ${GIT_GUARD.map((_, i) => `GIT_CONFIG_KEY_${i} GIT_CONFIG_VALUE_${i}`).join(' ')}`;

/** The exact line the script prints when `cmd` applied the model patch. */
export function appliedLine(cmd: string): string {
  return `${APPLY_PATCH_PASS} (${cmd})`;
}

/** The full test command: the spec's command plus the harness's test directives. */
export function testCommand(spec: EvalSpec, testPatch: string): string {
  return [spec.testCmd, ...testDirectives(testPatch, spec.directives).map(shellQuote)].join(' ');
}

export function makeEvalScript({ instance, spec, patchPath, testPatchPath }: EvalScriptInput): string {
  const base = shellQuote(instance.base_commit);
  const testFiles = modifiedFiles(instance.test_patch).map(shellQuote);
  // `--` keeps a test file named like an option or a ref from being read as one.
  const reset = testFiles.length > 0 ? `git checkout ${base} -- ${testFiles.join(' ')}` : ': no test files to reset';
  const lines = [
    '#!/bin/bash',
    'set -uxo pipefail',
    // Config through the environment is command-line scope: it writes no ~/.gitconfig and the
    // repository cannot override it. safe.directory: the tree may be owned by another uid than the
    // scorer. hooksPath: a patch that plants .git/hooks/post-checkout (the `patch` fallback writes
    // anywhere in the tree) must not run code before the tests or print fake markers; nor may an
    // fsmonitor command. (score-instance.ts also refuses patches that write inside .git at all.)
    // It is unset around the test command, whose own use of git must see the environment's config.
    GIT_GUARD_ON,
    `cd ${shellQuote(spec.workdir)}`,
    ...spec.preCommands,
  ];
  if (patchPath !== null) {
    const p = shellQuote(patchPath);
    // The apply commands echo the patch's own lines (git apply prints a failing hunk's context),
    // which would let a patch forge the markers in the one merged stream: no run of five '>' may
    // come through. pipefail keeps the apply command's status as the pipeline's.
    GIT_APPLY_CMDS.forEach((cmd, i) => {
      lines.push(`${i === 0 ? 'if' : 'elif'} ${cmd} ${p} 2>&1 | sed 's/>>>>>/>>>>_/g'; then`, `  echo ${shellQuote(appliedLine(cmd))}`);
    });
    // Like the harness, a patch that applies nowhere stops the evaluation before any test runs.
    lines.push('else', `  echo ${shellQuote(APPLY_PATCH_FAIL)}`, '  exit 1', 'fi');
  }
  lines.push(
    reset,
    `git apply -v ${shellQuote(testPatchPath)}`,
    GIT_GUARD_OFF,
    // the build sees the patched tree, before the markers as in the harness: its output is not graded
    ...spec.build,
    `: ${shellQuote(START_TEST_OUTPUT)}`,
    testCommand(spec, instance.test_patch),
    `: ${shellQuote(END_TEST_OUTPUT)}`,
    GIT_GUARD_ON,
    reset,
  );
  return `${lines.join('\n')}\n`;
}
