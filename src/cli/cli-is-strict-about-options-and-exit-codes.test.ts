/**
 * The CLI as a user meets it (spawned, as a shell would): option values are checked before any
 * work, with one line naming the option and exit 2; missing inputs are exit 3; `run` takes
 * repeatable -e, exits as shells do for commands not found or not executable, and keeps progress
 * out of the command's own stderr.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, type Ran, runCli } from '../../test/helpers/run-cli.js';
import { populateBusyboxRoot } from '../recipe/base-rootfs.js';
import { LocalRegistry } from '../registry/local.js';
import { StorePaths } from '../store/paths.js';
import { pushTree } from '../publish/push.js';

const work = mkdtempSync(join(tmpdir(), 'ms-cli-'));
chmodSync(work, 0o755); // the sandbox's subordinate ids must reach the store below it
const registry = join(work, 'registry');
const store = join(work, 'store');

function cli(args: string[]): Promise<Ran> {
  return runCli(['--registry', registry, '--store', store, ...args]);
}

beforeAll(async () => {
  const root = join(work, 'rootfs');
  await populateBusyboxRoot('/bin/busybox', root);
  await pushTree(new LocalRegistry(registry), new StorePaths(join(work, 'push')), root, { tag: 'cli/busybox' });
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('option values', () => {
  // The ref does not exist: a value checked after the pull would be reported as exit 3, not 2.
  const bad: [string[], string][] = [
    [['run', '--pids', 'abc', 'no/such', '--', 'true'], '--pids'],
    [['run', '--cpus', '-1', 'no/such', '--', 'true'], '--cpus'],
    [['run', '--memory', '0', 'no/such', '--', 'true'], '--memory'],
    [['run', '--workdir', '../../etc', 'no/such', '--', 'true'], '--workdir'],
    [['run', '--timeout', '5x', 'no/such', '--', 'true'], '--timeout'],
    [['run', '--disk', '1q', 'no/such', '--', 'true'], '--disk'],
    [['run', '--network', 'bridge', 'no/such', '--', 'true'], '--network'],
    [['run', '-e', '1A=x', 'no/such', '--', 'true'], '--env'],
    [['pull', '--jobs', '0', 'no/such'], '--jobs'],
    [['pull', '--id-shift', 'some', 'no/such'], '--id-shift'],
    [['gc', '--grace', 'soon'], '--grace'],
    [['score', 'd.jsonl', '--predictions', 'gold', '--specs', 's.yaml', '--jobs', '1.5'], '--jobs'],
    [['build', 'r.yaml', '--ram-upper', 'lots'], '--ram-upper'],
    [['--progress', 'loud', 'ls'], '--progress'],
  ];
  it.each(bad)('%j is refused with exit 2 and one line naming %s, before any work', async (args, option) => {
    const r = await cli(args);
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(option);
    expect(r.stdout).toBe('');
  });

  it('a --store or --registry that is a file is invalid input (exit 2), not an ENOTDIR', async () => {
    const file = join(work, 'a-file');
    writeFileSync(file, 'x');
    for (const args of [
      ['--store', file, 'ls'],
      ['--store', join(file, 'below'), 'ls'],
      ['--registry', file, 'ls'],
    ]) {
      const r = await new Promise<Ran>((done) => {
        const child = spawn(CLI, args, { stdio: ['ignore', 'pipe', 'pipe'] });
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('close', (code) => done({ code, stdout: '', stderr }));
      });
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^error: --(store|registry) .* is not a directory\nhint: /);
      expect(r.stderr).not.toMatch(/ENOTDIR|ENOENT/);
    }
  });

  it('missing input files are exit 3 with their name', async () => {
    const specs = join(work, 'specs.yaml');
    writeFileSync(specs, 'x: 1\n');
    const predictions = await cli(['score', join(work, 'rows.jsonl'), '--predictions', join(work, 'none.jsonl'), '--specs', specs]);
    expect(predictions.code).toBe(3);
    expect(predictions.stderr).toContain(`predictions file ${join(work, 'none.jsonl')} not found`);
    const dataset = await cli(['pull', '--dataset', join(work, 'none.jsonl')]);
    expect(dataset.code).toBe(3);
    expect(dataset.stderr).not.toMatch(/ENOENT/);
  });

  it('a ref or registry that does not exist is exit 3 for pull and copy too, with a hint that works', async () => {
    const pull = await cli(['pull', 'cli/nope']);
    expect(pull.code).toBe(3);
    const nowhere = join(work, 'no-registry');
    const all = await cli(['copy', '--from', nowhere, '--to', join(work, 'copied'), '--all']);
    expect(all.code).toBe(3);
    expect(all.stderr).toContain(`source registry ${nowhere} not found`);
    const one = await cli(['copy', '--from', registry, '--to', join(work, 'copied'), 'cli/nope']);
    expect(one.code).toBe(3);
    expect(one.stderr).toContain(`minisandbox --registry ${registry} ls`);
  });

  it('audit --html makes the directory of its report', async () => {
    const report = join(work, 'reports', 'today', 'audit.html');
    const r = await cli(['audit', '--html', report]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`report written to ${report}`);
  });

  it('--version prints the version alone', async () => {
    const r = await cli(['--version']);
    expect(r).toEqual({ code: 0, stdout: '0.1.0\n', stderr: '' });
  });
});

describe('run', () => {
  it('takes -e/--env repeatedly before the ref', async () => {
    const r = await cli(['run', '--env', 'A=1', '-e', 'B=two', '-e', 'A=3', 'cli/busybox', '--', '/bin/sh', '-c', 'echo "$A-$B"']);
    expect(r.stdout).toBe('3-two\n');
    expect(r.code).toBe(0);
  });

  it('exits 127 for a command not found and 126 for one that is not executable, as shells do', async () => {
    const missing = await cli(['run', 'cli/busybox', '--', 'no-such-command']);
    expect(missing.code).toBe(127);
    expect(missing.stderr).toContain('no-such-command');
    const notExec = await cli(['run', 'cli/busybox', '--', '/etc/passwd']);
    expect(notExec.code).toBe(126);
  });

  it("passes the command's own exit code and leaves its stderr alone when stderr is not a terminal", async () => {
    const r = await cli(['run', 'cli/busybox', '--', '/bin/sh', '-c', 'echo out; echo err >&2; exit 7']);
    expect(r).toEqual({ code: 7, stdout: 'out\n', stderr: 'err\n' });
  });

  it('reports progress as JSON lines on stderr only when asked (--progress json)', async () => {
    const r = await cli(['--progress', 'json', 'run', 'cli/busybox', '--', 'true']);
    expect(r.code).toBe(0);
    const events = r.stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; message: string });
    expect(events.length).toBeGreaterThan(0);
    expect(events.every((e) => e.type === 'progress' && e.message.startsWith('pull cli/busybox'))).toBe(true);
  });
});
