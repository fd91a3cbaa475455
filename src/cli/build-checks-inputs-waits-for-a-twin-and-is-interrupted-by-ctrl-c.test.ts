/**
 * `build` as a user meets it: inputs are checked before any work (a missing `--repos` used to
 * fail only after the base was built), two builds of one node in one store build it once (the
 * second waits and finds it cached; they wrote into each other's log and reran the same
 * debootstrap), a plain progress file names the running node, its phase and log while its
 * commands run, and Ctrl-C records the node as interrupted, not failed (exit 130): nothing of it is
 * published, so the next run builds it again.
 */
import { chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually } from '../../test/helpers/eventually.js';
import { runCli, startCli } from '../../test/helpers/run-cli.js';

const work = mkdtempSync(join(tmpdir(), 'ms-build-cli-'));
chmodSync(work, 0o755); // the build sandboxes' ids must reach the store below it
afterAll(() => rmSync(work, { recursive: true, force: true }));
const recipes = join(work, 'recipes');
cpSync(resolve('recipes/test'), recipes, { recursive: true, filter: (src) => !src.includes('/repos') });
const env = (name: string, commands: string[]): string => {
  const file = join(recipes, `${name}.yaml`);
  writeFileSync(file, `kind: env\nname: ${name}\nparent: base.yaml\nnetwork: false\ncommands:\n${commands.map((c) => `  - ${c}\n`).join('')}`);
  return file;
};

/** A CLI in its own registry and store. */
const where = (name: string): string[] => ['--registry', join(work, name, 'registry'), '--store', join(work, name, 'store')];

const BuildSummarySchemaKeys = (out: string): { nodes: Array<{ kind: string; status: string; log?: string; error?: string; durationMs: number }> } =>
  JSON.parse(out) as { nodes: Array<{ kind: string; status: string; log?: string; error?: string; durationMs: number }> };

describe('build', () => {
  it('checks --repos and every commit before building anything', async () => {
    const repos = await runCli([
      ...where('inputs'),
      'build',
      join(recipes, 'dataset.jsonl'),
      '--specs',
      join(recipes, 'specs.yaml'),
      '--repos',
      '/nonexistent',
    ]);
    expect(repos.code).toBe(3);
    expect(repos.stderr).toMatch(/^error: --repos \/nonexistent: no such directory/);
    // a dataset whose repository lacks a row's commit is refused before its base is built
    const repo = join(work, 'repos', 'test', 'shlib');
    await promisify(execFile)(resolve('recipes/test/make-repo.sh'), [repo]);
    const row = JSON.parse(readFileSync(join(recipes, 'dataset.jsonl'), 'utf8').split('\n')[0]!) as Record<string, unknown>;
    writeFileSync(join(recipes, 'bad.jsonl'), `${JSON.stringify({ ...row, base_commit: '0'.repeat(40) })}\n`);
    const commit = await runCli([
      ...where('inputs'),
      'build',
      join(recipes, 'bad.jsonl'),
      '--specs',
      join(recipes, 'specs.yaml'),
      '--repos',
      join(work, 'repos'),
    ]);
    expect(commit.code).toBe(2);
    expect(commit.stderr).toMatch(/bad\.jsonl:1: commit 0{40} not found in/);
    // nothing was built: no log, no ref
    const files = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir, { recursive: true, encoding: 'utf8' }) : []);
    expect(files(join(work, 'inputs', 'store', 'logs'))).toEqual([]);
    expect(files(join(work, 'inputs', 'registry', 'refs'))).toEqual([]);
  });

  it('builds a node once when two builds of it run at once in one store, each with a log of its own', async () => {
    const recipe = env('twice', ['sleep 2', 'echo ok > /ok']);
    const [a, b] = await Promise.all([runCli([...where('twins'), '--json', 'build', recipe]), runCli([...where('twins'), '--json', 'build', recipe])]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const envRows = [a, b].map((r) => BuildSummarySchemaKeys(r.stdout).nodes.find((n) => n.kind === 'env')!);
    expect(envRows.map((r) => r.status).sort()).toEqual(['built', 'cached']);
    const log = readFileSync(envRows.find((r) => r.status === 'built')!.log!, 'utf8');
    // one build in it, not two interleaved
    expect(log.match(/^build of env twice/gm)).toHaveLength(1);
    expect(log.match(/--- output ---/g)).toHaveLength(1);
  });

  it('says the running node, its phase and log in a plain progress file; Ctrl-C leaves it interrupted, rebuilt next time', async () => {
    const recipe = env('sleepy', ['sleep 600']);
    const run = startCli([...where('sigint'), '--json', '--progress', 'plain', 'build', recipe]);
    let ended: Awaited<typeof run.ended>;
    try {
      await eventually(() => run.child.exitCode !== null || /env sleepy \(commands \d+:\d\d\) · .* · log \S+env-sleepy-\S+\.log$/m.test(run.stderr()));
    } finally {
      run.child.kill('SIGINT'); // also where the wait failed: no build is left running
      ended = await run.ended;
    }
    expect(ended.code).toBe(130);
    const sleepy = BuildSummarySchemaKeys(ended.stdout).nodes.find((n) => n.kind === 'env')!;
    expect(sleepy.status).toBe('interrupted');
    expect(readFileSync(sleepy.log!, 'utf8')).toMatch(/--- interrupted \(stopped by SIGINT\): nothing published ---/);
    // the next run runs its commands again (here ended by its timeout: that one is a failure)
    const again = await runCli([...where('sigint'), '--json', '--progress', 'none', 'build', recipe, '--timeout', '1s']);
    const rerun = BuildSummarySchemaKeys(again.stdout).nodes.find((n) => n.kind === 'env')!;
    expect(rerun.status).toBe('failed');
    expect(rerun.error).toMatch(/timeout/);
    expect(again.code).toBe(1);
  });
});
