#!/usr/bin/env node
/**
 * minisandbox as a library, from plain node: publish an environment (a busybox root) to a
 * registry, open a sandbox of it, let an "agent" work in it, and grade what it did the way the
 * SWE-bench harness grades a test log.
 *
 *   node examples/run-and-grade.mjs [WORKDIR]     (as root, or a user with subordinate ids)
 *
 * WORKDIR (default: a new temp dir) gets registry/, store/ and the rootfs; it must be searchable
 * by the sandbox's subordinate ids (mode 755), as a store always must. Prints one JSON line.
 */
import { chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StorePaths, getParser, gradeTests, openRegistry, openSandbox, populateBusyboxRoot, pushTree, resolutionStatus } from 'minisandbox';

const work = process.argv[2] ?? mkdtempSync(join(tmpdir(), 'minisandbox-example-'));
chmodSync(work, 0o755);

// 1. An environment: a layer captured from a directory tree, pushed and tagged in a registry.
const registry = openRegistry(join(work, 'registry'));
const store = new StorePaths(join(work, 'store'));
await populateBusyboxRoot('/bin/busybox', join(work, 'rootfs'));
await pushTree(registry, new StorePaths(join(work, 'push')), join(work, 'rootfs'), {
  tag: 'example/busybox',
  config: { workdir: '/work', env: { TASK: 'fix-it' } },
});

// 2. A sandbox of it (pulled into the store on first use), destroyed when the block ends.
//    The signal bounds the whole open (pull + start); commands take one too.
const opened = AbortSignal.timeout(120_000);
let reward;
{
  // `await using sb = ...` in TypeScript or newer JavaScript; node 20 spells it out
  const sb = await openSandbox(registry, store, 'example/busybox', { signal: opened, limits: { pids: 256 } });
  try {
    // the agent's rollout: a persistent shell, files, plain commands
    await sb.run('mkdir -p /work && cd /work && echo "print(1)" > fix.py');
    await sb.writeFile('/work/notes.txt', `task ${sb.config.env.TASK}\n`);
    // the "test suite": pytest-style lines, as a SWE-bench spec's test command prints them
    const tests = await sb.exec([
      '/bin/sh',
      '-c',
      'test -f fix.py && echo "PASSED tests/test_fix.py::test_fix" || echo "FAILED tests/test_fix.py::test_fix"; echo "PASSED tests/test_old.py::test_old"',
    ]);
    // 3. The reward: FAIL_TO_PASS and PASS_TO_PASS graded on the log
    const status = getParser('pytest')(tests.stdout);
    const graded = gradeTests(status, { FAIL_TO_PASS: ['tests/test_fix.py::test_fix'], PASS_TO_PASS: ['tests/test_old.py::test_old'] });
    reward = { resolved: resolutionStatus(graded) === 'RESOLVED_FULL', notes: (await sb.readFile('/work/notes.txt')).toString(), exitCode: tests.exitCode };
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}
console.log(JSON.stringify(reward));
