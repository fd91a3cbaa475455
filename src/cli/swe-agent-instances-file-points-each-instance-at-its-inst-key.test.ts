import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Ran, runCli } from '../../test/helpers/run-cli.js';
import { parse as parseYaml } from 'yaml';

const work = mkdtempSync(join(tmpdir(), 'ms-sweagent-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function cli(args: string[]): Promise<Ran> {
  return runCli(['--registry', join(work, 'registry'), '--store', join(work, 'store'), ...args]);
}

const row = (id: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ instance_id: id, repo: 'demo/calc', base_commit: `${id.length}`.repeat(40), version: '0.1', problem_statement: `fix ${id}`, ...extra });

describe('swe-agent-instances', () => {
  const dataset = join(work, 'mini.jsonl');
  writeFileSync(dataset, `${[row('calc-1'), row('calc-22'), row('calc-333')].join('\n')}\n`);
  const tokenFile = join(work, 'serve.token');
  writeFileSync(tokenFile, 'a-token-of-sixteen-or-more\n');

  it('writes one RemoteDeployment instance per selected row, at its inst: key, with the token, readable by its owner only', async () => {
    const out = join(work, 'instances.json');
    const r = await cli([
      'swe-agent-instances',
      dataset,
      '--server',
      'http://node1:7000/',
      '--token-file',
      tokenFile,
      '-o',
      out,
      '--instances',
      'calc-1,calc-333',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('wrote 2 instances');
    expect(statSync(out).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual(
      ['calc-1', 'calc-333'].map((id) => ({
        env: {
          deployment: { type: 'remote', host: `http://node1:7000/swerex/inst:mini:${id}`, port: null, auth_token: 'a-token-of-sixteen-or-more', timeout: 60 },
          repo: { type: 'preexisting', repo_name: 'testbed', base_commit: `${id.length}`.repeat(40) },
        },
        problem_statement: { type: 'text', text: `fix ${id}`, id, extra_fields: {} },
      })),
    );

    const yamlOut = join(work, 'instances.yaml');
    const y = await cli([
      'swe-agent-instances',
      dataset,
      '--server',
      'https://n2:7443',
      '--token-file',
      tokenFile,
      '-o',
      yamlOut,
      '--dataset',
      'sb',
      '--repo-name',
      'repo',
      '--timeout',
      '2m',
    ]);
    expect(y.code, y.stderr).toBe(0);
    const parsed = parseYaml(readFileSync(yamlOut, 'utf8')) as Array<{ env: { deployment: { host: string; timeout: number }; repo: { repo_name: string } } }>;
    expect(parsed.map((i) => i.env.deployment.host)).toEqual(['calc-1', 'calc-22', 'calc-333'].map((id) => `https://n2:7443/swerex/inst:sb:${id}`));
    expect(parsed[0]?.env.deployment.timeout).toBe(120);
    expect(parsed[0]?.env.repo.repo_name).toBe('repo');
  }, 60_000);

  it('says what is wrong: a bad --server (exit 2), no token file (exit 3), a row without problem_statement (exit 2)', async () => {
    const out = join(work, 'never.json');
    const badServer = await cli(['swe-agent-instances', dataset, '--server', 'node1:7000', '--token-file', tokenFile, '-o', out]);
    expect([badServer.code, badServer.stderr]).toEqual([2, expect.stringContaining('--server')]);
    const noToken = await cli(['swe-agent-instances', dataset, '--server', 'http://node1:7000', '--token-file', join(work, 'missing.token'), '-o', out]);
    expect([noToken.code, noToken.stderr]).toEqual([3, expect.stringContaining('missing.token')]);
    const noText = join(work, 'notext.jsonl');
    writeFileSync(noText, `${row('calc-9', { problem_statement: undefined })}\n`);
    const r = await cli(['swe-agent-instances', noText, '--server', 'http://node1:7000', '--token-file', tokenFile, '-o', out]);
    expect([r.code, r.stderr]).toEqual([2, expect.stringContaining('calc-9 has no problem_statement')]);
    expect(() => statSync(out)).toThrow();
  }, 60_000);
});
