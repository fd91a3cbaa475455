/**
 * `minisandbox swe-agent-instances DATASET --server URL -o FILE`: the SWE-agent instances file
 * (`sweagent run-batch --instances.type expert_file --instances.path FILE`) that runs each instance
 * of a dataset on a `serve` node through its SWE-ReX face. What it needs is imported in the action.
 */
import type { Command } from 'commander';
import { z } from 'zod';
import type { GlobalOptions } from './context.js';
import { fromSchema, opt, option } from './options.js';
import { addSelectionOptions, type SelectionFlags, selectionFrom } from './select-options.js';

interface Opts extends SelectionFlags {
  server: string;
  output: string;
  dataset?: string;
  tokenFile?: string;
  repoName: string;
  /** Milliseconds. */
  timeout: number;
}

export function registerSweAgentCommand(program: Command, globals: () => GlobalOptions, _setExit: (code: number) => void): void {
  const cmd = program
    .command('swe-agent-instances')
    .description(
      'write a SWE-agent instances file (--instances.type expert_file): each instance runs on a `serve` node ' +
        "through SWE-ReX's RemoteDeployment, at its key inst:<dataset>:<instance_id>",
    )
    .argument('<dataset>', 'SWE-bench JSONL/JSON rows (instance_id, base_commit, problem_statement); environments are tagged <dataset>/<instance_id>')
    .requiredOption('--server <url>', 'the serve URL as SWE-agent reaches it, e.g. http://node1:7000', fromSchema(serverUrl))
    .requiredOption('-o, --output <file>', 'the instances file to write: JSON, or YAML for .yaml/.yml (mode 0600: it holds the token)')
    .option('--dataset <name>', 'dataset name used in tags (default: from the file name)')
    .option('--token-file <file>', 'the token serve takes (default: <store>/serve.token, where serve writes it)')
    .option('--repo-name <name>', 'the repository directory at the root of each environment', fromSchema(repoName), 'testbed')
    .addOption(
      option(
        '--timeout <duration>',
        "SWE-ReX's client timeout for is_alive and close (its 0.15 s default is for a local server)",
        opt.duration({ min: 1000 }),
        {
          value: 60_000,
          shown: '60s',
        },
      ),
    );
  addSelectionOptions(cmd).action(async (datasetFile: string, o: Opts) => {
    const [
      { readFile, writeFile, chmod },
      { join },
      { makeContext },
      { loadDataset },
      { selectInstances },
      { datasetNameFromFile },
      { sweAgentInstances },
      { NotFoundError, InvalidInputError },
    ] = await Promise.all([
      import('node:fs/promises'),
      import('node:path'),
      import('./context.js'),
      import('../dataset/read.js'),
      import('../dataset/select.js'),
      import('../builder/plan.js'),
      import('../server/swe-agent-instances.js'),
      import('../errors.js'),
    ]);
    const ctx = await makeContext(globals());
    const tokenFile = o.tokenFile ?? join(ctx.store.root, 'serve.token');
    const token = (
      await readFile(tokenFile, 'utf8').catch((e: unknown) => {
        if ((e as { code?: unknown }).code === 'ENOENT')
          throw new NotFoundError(`token file ${tokenFile}`, 'start `minisandbox serve` first (it writes its token there), or pass --token-file');
        throw e;
      })
    ).trim();
    if (token === '') throw new InvalidInputError(`token file ${tokenFile} is empty`, 'pass the --token-file serve was started with');
    const rows = selectInstances(await loadDataset(datasetFile), await selectionFrom(o), (r) => r.row.instance_id);
    const dataset = o.dataset ?? datasetNameFromFile(datasetFile);
    const instances = sweAgentInstances(rows, { dataset, server: o.server, token, repoName: o.repoName, timeoutS: o.timeout / 1000 });
    const yaml = /\.ya?ml$/i.test(o.output);
    const text = yaml ? (await import('yaml')).stringify(instances) : `${JSON.stringify(instances, null, 2)}\n`;
    await writeFile(o.output, text, { mode: 0o600 });
    await chmod(o.output, 0o600); // an existing file keeps its mode through writeFile
    ctx.out.result(
      { file: o.output, dataset, instances: instances.length, server: o.server },
      () =>
        `wrote ${instances.length} instances to ${o.output}; run them with\n` +
        `  sweagent run-batch --instances.type expert_file --instances.path ${o.output} ...\n` +
        `each on ${o.server}/swerex/inst:${dataset}:<instance_id> (a sandbox made at its first create_session)`,
    );
  });
}

function serverUrl(): z.ZodType<string, string> {
  return z
    .string()
    .trim()
    .regex(/^https?:\/\/[^/\s?#]+\/?$/, 'use http(s)://host:port, e.g. http://node1:7000')
    .transform((s) => s.replace(/\/+$/, ''));
}

function repoName(): z.ZodType<string, string> {
  return z.string().regex(/^[A-Za-z0-9_.-]+$/, 'a directory name at the root of the environment, e.g. testbed');
}
