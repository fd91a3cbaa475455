/**
 * The whole pipeline on the demo dataset, for real: debootstrap base, apt-installed Python and
 * pytest in build sandboxes, history-free instance checkouts, then grading in fresh sandboxes.
 * Slow (a few minutes: debootstrap and apt from Debian's mirror), and the one test that proves
 * the parts fit. Then every code block of README.md and clients/python/README.md runs against
 * that demo environment, so an example the READMEs show can never rot.
 */
import { execFile, spawn } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { loadSpecs } from '../../src/dataset/specs.js';
import { parseStructured } from '../../src/recipe/structured.js';
import { type CodeBlock, codeBlocks } from '../helpers/readme-blocks.js';

const run = promisify(execFile);
const cli = resolve('bin/minisandbox');
const demo = resolve('recipes/demo');
const work = mkdtempSync(join(tmpdir(), 'ms-e2e-'));
chmodSync(work, 0o755); // sandboxes' subordinate ids must reach the store below it
const env = { ...process.env, MINISANDBOX_REGISTRY: join(work, 'registry'), MINISANDBOX_STORE: join(work, 'store') };
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function ms(args: string[], okCodes = [0]): Promise<{ stdout: string; code: number }> {
  try {
    const r = await run(cli, ['--json', ...args], { env, maxBuffer: 256 << 20 });
    return { stdout: r.stdout, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    if (okCodes.includes(err.code ?? -1)) return { stdout: err.stdout ?? '', code: err.code ?? -1 };
    throw new Error(`minisandbox ${args.join(' ')} exited ${err.code}: ${err.stderr?.slice(-2000)}`);
  }
}

describe('demo dataset: build -> run -> score', { timeout: 900_000 }, () => {
  const repos = join(work, 'repos');

  it('builds one base, two envs, the shared history on each and four instances, and a rebuild is fully cached', async () => {
    await run(join(demo, 'make-repo.sh'), [join(repos, 'demo/pycalc')]);
    const first = JSON.parse(
      (await ms(['build', join(demo, 'dataset.jsonl'), '--specs', join(demo, 'specs.yaml'), '--repos', repos, '--jobs', '2'])).stdout,
    ) as {
      summary: Record<string, number>;
      counts: Record<string, number>;
    };
    // one history layer per env (the demo has two versions): the same bytes, kept once
    expect(first.counts).toEqual({ base: 1, env: 2, history: 2, instance: 4 });
    expect(first.summary).toMatchObject({ built: 9, failed: 0 });
    const again = JSON.parse((await ms(['build', join(demo, 'dataset.jsonl'), '--specs', join(demo, 'specs.yaml'), '--repos', repos])).stdout) as {
      summary: Record<string, number>;
    };
    expect(again.summary).toMatchObject({ built: 0, cached: 9 });
  });

  it('runs a task: the repository at its base commit, without the fix in its history, network off', async () => {
    const log = JSON.parse((await ms(['run', 'demo/demo__pycalc-1', '--', 'git', 'log', '--all', '--format=%s'])).stdout) as {
      stdout: string;
      exitCode: number;
    };
    expect(log.exitCode).toBe(0);
    expect(log.stdout).toContain('Initial version');
    expect(log.stdout).not.toContain('Fix #1');
    // the tests that exist at the base commit pass; the failing ones arrive with the test patch
    const tests = JSON.parse((await ms(['run', 'demo/demo__pycalc-1', '--', 'python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider'])).stdout) as {
      stdout: string;
    };
    expect(tests.stdout).toMatch(/\d+ passed/);
    // no network inside: the build had it, a task does not
    const net = await ms(
      ['run', 'demo/demo__pycalc-1', '--', 'python3', '-c', 'import socket; socket.create_connection(("deb.debian.org", 80), timeout=5)'],
      [1],
    );
    expect(net.code).toBe(1);
  });

  it('scores the gold patches as resolved and validates gold vs empty', async () => {
    const reports = join(work, 'reports');
    const r = JSON.parse(
      (await ms(['score', join(demo, 'dataset.jsonl'), '--predictions', 'gold', '--specs', join(demo, 'specs.yaml'), '--report-dir', reports, '--jobs', '2']))
        .stdout,
    ) as {
      summary: { resolved_instances: number; total_instances: number; error_instances: number };
      summaryPath: string;
    };
    expect(r.summary.total_instances).toBe(4);
    expect(r.summary.resolved_instances).toBe(4);
    expect(existsSync(join(reports, 'minisandbox', 'gold', 'demo__pycalc-1', 'test_output.txt'))).toBe(true);
    const report = JSON.parse(readFileSync(join(reports, 'minisandbox', 'gold', 'demo__pycalc-1', 'report.json'), 'utf8')) as Record<
      string,
      { resolved: boolean; tests_status: unknown }
    >;
    expect(report['demo__pycalc-1']?.resolved).toBe(true);

    const v = JSON.parse((await ms(['validate', join(demo, 'dataset.jsonl'), '--specs', join(demo, 'specs.yaml'), '--jobs', '2'])).stdout) as {
      ok_ids: string[];
    };
    expect(v.ok_ids.sort()).toEqual(['demo__pycalc-1', 'demo__pycalc-2', 'demo__pycalc-3', 'demo__pycalc-4']);
  });

  it('audits the registry: far below one image per task', async () => {
    const a = JSON.parse((await ms(['audit'])).stdout) as { totals: { registryToLogical: number; refs: number } };
    expect(a.totals.refs).toBe(4);
    expect(a.totals.registryToLogical).toBeLessThan(0.15);
  });
});

/**
 * A place for the README's commands to run as a reader would, in the checkout (`recipes/...`,
 * `bin/...` resolve), without leaving files in it: a dir of links to the checkout's top level.
 */
function readerDir(): string {
  const d = join(work, 'reader');
  if (existsSync(d)) return d;
  mkdirSync(d);
  for (const name of ['bin', 'clients', 'examples', 'dist', 'src', 'node_modules', 'package.json']) symlinkSync(resolve(name), join(d, name));
  // a copy: the blocks write into recipes (make-repo.sh), and the checkout stays as it was
  cpSync(resolve('recipes'), join(d, 'recipes'), { recursive: true, filter: (src) => !/[/]repos$/.test(src) });
  return d;
}

/** A `serve` over the demo registry and store, grading the demo dataset, as the README starts one. */
async function demoServer(): Promise<{ url: string; tokenFile: string; stop: () => Promise<void> }> {
  const evalDataset = `demo=${join(demo, 'dataset.jsonl')},${join(demo, 'specs.yaml')}`;
  // a token file of its own: a README block that starts a serve of this store writes the store's
  const args = ['serve', '--listen', '127.0.0.1:0', '--token-file', join(work, 'readme.token'), '--eval-dataset', evalDataset];
  const p = spawn(cli, [...args, '--reports-dir', join(work, 'serve-reports')], {
    env,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const first = await new Promise<string>((r) => createInterface({ input: p.stdout }).once('line', r));
  const { listening, token_file } = JSON.parse(first) as { listening: string; token_file: string };
  const exited = new Promise((r) => p.on('exit', r));
  return { url: listening, tokenFile: token_file, stop: async () => void (p.kill('SIGTERM'), await exited) };
}

async function runBlock(b: CodeBlock, server: { url: string; tokenFile: string }): Promise<void> {
  const cwd = readerDir();
  const readerEnv = {
    ...env,
    PATH: `${resolve('bin')}:${process.env.PATH ?? ''}`,
    MINISANDBOX_URL: server.url,
    MINISANDBOX_TOKEN_FILE: server.tokenFile,
    PYTHONPATH: resolve('clients/python/src'),
  };
  const opts = { cwd, env: readerEnv, maxBuffer: 64 << 20, timeout: 600_000 };
  const where = `${b.file}:${b.line}`;
  try {
    if (b.lang === 'sh') await run('bash', ['-euo', 'pipefail', '-c', b.code], opts);
    else if (b.lang === 'python') {
      const f = join(work, `block-${b.line}.py`);
      writeFileSync(f, b.code);
      await run('/usr/bin/python3', [f], opts);
    } else if (b.lang === 'js') {
      // as another project that installed the package: node_modules/minisandbox is the checkout
      const app = join(work, `app-${b.line}`);
      mkdirSync(join(app, 'node_modules'), { recursive: true });
      symlinkSync(resolve('.'), join(app, 'node_modules', 'minisandbox'));
      writeFileSync(join(app, 'main.mjs'), b.code);
      await run(process.execPath, ['main.mjs'], { ...opts, cwd: app });
    } else if (b.lang === 'yaml') {
      const value = (await parseStructured(b.code, where)) as Record<string, unknown>;
      // a specs file: loaded where the demo's recipes are, as `build --specs` would
      if ('repos' in value) {
        const f = join(demo, `.readme-specs-${process.pid}.yaml`);
        writeFileSync(f, b.code);
        try {
          expect((await loadSpecs(f)).entries.size).toBeGreaterThan(0);
        } finally {
          rmSync(f, { force: true });
        }
      }
    } else throw new Error(`no way to run a \`${b.lang || 'untagged'}\` block: tag it sh, python, js or yaml`);
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message?: string };
    throw new Error(`${where} (${b.lang}) failed: ${err.message}\n${String(err.stdout ?? '').slice(-2000)}\n${String(err.stderr ?? '').slice(-3000)}`);
  }
}

describe('every code block of the READMEs runs against the demo environment', { timeout: 1_800_000 }, () => {
  const blocks = ['README.md', 'clients/python/README.md'].flatMap((f) => codeBlocks(f));

  it('skips only the blocks that say why, and no more than the two that run the suite itself', () => {
    const skipped = blocks.filter((b) => b.skip !== undefined).map((b) => `${b.file}:${b.line}: ${b.skip}`);
    expect(skipped).toHaveLength(2);
    expect(skipped.join('\n')).toMatch(/npm run demo[\s\S]*npm test/);
  });

  it('runs them, in order', async () => {
    const server = await demoServer();
    try {
      for (const b of blocks) if (b.skip === undefined) await runBlock(b, server);
    } finally {
      await server.stop();
    }
  });
});
