/**
 * Two `serve` processes recording one run into one reports dir: every evaluation lands in the run
 * summary. One server runs in this process, the other is `minisandbox serve` as a child process;
 * per-process serialization alone would let their read-modify-writes of the summary overwrite each
 * other. Empty patches are graded without a sandbox, so each evaluation is only its record.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../test/helpers/sandbox-testkit.js';
import { LocalRegistry } from '../registry/local.js';
import { RunSummarySchema } from '../score/report.js';
import { StorePaths } from '../store/paths.js';
import { type RunningServer, startServer } from './serve.js';

const BIN = resolve(import.meta.dirname, '../../bin/minisandbox');
const PER_SERVER = 40;
const work = mkdtempSync(join(tmpdir(), 'ms-serve-summary-'));
chmodSync(work, 0o755);
const reportsDir = join(work, 'reports');
const rows = join(work, 'data.jsonl');
const specs = join(work, 'specs.yaml');
const ids = Array.from({ length: 2 * PER_SERVER }, (_, i) => `test__p-${String(i).padStart(3, '0')}`);
let inProcess: RunningServer;
let child: ChildProcess;
let childExit: Promise<number | null>;
let childUrl: string;

beforeAll(async () => {
  const row = JSON.parse(readFileSync(join(REPO_ROOT, 'recipes/test/dataset.jsonl'), 'utf8').split('\n')[0]!) as Record<string, unknown>;
  writeFileSync(rows, `${ids.map((id) => JSON.stringify({ ...row, instance_id: id })).join('\n')}\n`);
  writeFileSync(
    specs,
    [
      'defaults:',
      '  image: "oci:/nonexistent:sweb.eval.x86_64.{id}"',
      '  testCmd: shlib-test',
      '  logParser: pytest',
      '  workdir: /testbed',
      'repos:',
      '  test/shlib:',
      '    "1.0": {}',
    ].join('\n'),
  );
  mkdirSync(join(work, 'registry'));
  const tokenFile = join(work, 'token');
  inProcess = await startServer(
    new LocalRegistry(join(work, 'registry')),
    new StorePaths(join(work, 'store-a')),
    {
      listen: { host: '127.0.0.1', port: 0 },
      tokenFile,
      maxSandboxes: 4,
      idleTimeoutMs: 600_000,
      ttlMs: 3_600_000,
      evalDatasets: [{ rows, specs }],
      reportsDir,
    },
    () => undefined,
  );
  child = spawn(
    BIN,
    [
      '--registry',
      join(work, 'registry'),
      '--store',
      join(work, 'store-b'),
      'serve',
      '--listen',
      '127.0.0.1:0',
      '--token-file',
      tokenFile,
      '--eval-dataset',
      `${rows},${specs}`,
      '--reports-dir',
      reportsDir,
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  childExit = new Promise((r) => child.on('exit', (code) => r(code)));
  const first = await new Promise<string>((r) => createInterface({ input: child.stdout! }).once('line', r));
  childUrl = (JSON.parse(first) as { listening: string }).listening;
}, 300_000);

afterAll(async () => {
  if (child !== undefined && child.exitCode === null) child.kill('SIGTERM');
  await childExit;
  await inProcess?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('run summaries written by two server processes', () => {
  it('keep every evaluation each of them recorded', async () => {
    const token = readFileSync(join(work, 'token'), 'utf8').trim();
    const urls = [inProcess.url, childUrl];
    const answers = await Promise.all(
      ids.map(async (id, i) => {
        const r = await fetch(`${urls[i % 2]}/v1/evaluate`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ dataset: 'data', instance_id: id, patch: '', model: 'm', run_id: 'r' }),
        });
        return `${r.status} ${r.status === 200 ? '' : await r.text()}`;
      }),
    );
    expect(answers).toEqual(ids.map(() => '200 '));
    const s = RunSummarySchema.parse(JSON.parse(readFileSync(join(reportsDir, 'm.r.json'), 'utf8')));
    expect(s.submitted_ids).toEqual(ids);
    expect(s.empty_patch_ids).toEqual(ids);
    // the lock went with the last write; no temporary file is left
    expect(readdirSync(reportsDir).filter((f) => f.startsWith('m.r.json'))).toEqual(['m.r.json']);
  });
});
