/**
 * `minisandbox serve`: the sandbox server (src/server). Its modules, fastify included, are imported
 * in the action only: no other command pays for loading them.
 */
import type { Command } from 'commander';
import { z } from 'zod';
import { type GlobalOptions, checkDirOption, makeContext } from './context.js';
import { fromSchema, opt, option } from './options.js';
import { DEFAULT_JOB_LIMITS } from '../server/job-limits.js';
import { DEFAULT_MEMORY_LIMITS } from '../server/memory-limits.js';
import { DEFAULT_SANDBOX_NICE } from '../server/sandbox-nice.js';
import { packageVersion } from './command-line.js';

interface ServeOpts {
  listen: string;
  tokenFile?: string;
  maxSandboxes: number;
  maxJobsPerSandbox: number;
  jobOutputBudget: number;
  memoryBudget: number;
  maxOutput: number;
  sandboxNice: number;
  idleTimeout: number;
  ttl: number;
  evalDataset: string[];
  reportsDir: string;
  allowMount: string[];
  nodeName?: string;
  prefetchDataset: string[];
  prefetchIoBudget: number;
  readyAfterPrefetch?: boolean;
}

export function registerServeCommand(program: Command, globals: () => GlobalOptions, setExit: (code: number) => void): void {
  program
    .command('serve')
    .description('serve sandboxes over HTTP (native API under /v1, /metrics); token auth on every request; SIGTERM destroys its sandboxes')
    .addOption(
      option('--listen <host:port>', 'address to listen on (a non-loopback one needs --token-file)', fromSchema(listenText), {
        value: '127.0.0.1:7000',
        shown: '127.0.0.1:7000',
      }),
    )
    .option(
      '--token-file <file>',
      'the token clients must send; made (random, mode 0600) if the file is missing, never rewritten (default: $MINISANDBOX_TOKEN, else <store>/serve.token)',
    )
    .option('--max-sandboxes <n>', 'most sandboxes held at once (more get 429)', opt.int({ min: 1, max: 100_000 }), 64)
    .addOption(
      option('--idle-timeout <duration>', 'destroy a sandbox after this long without a request', opt.duration({ min: 1000 }), {
        value: 30 * 60_000,
        shown: '30m',
      }),
    )
    .addOption(
      option('--ttl <duration>', 'the longest a sandbox lives (a create may ask for less)', opt.duration({ min: 1000 }), { value: 6 * 3_600_000, shown: '6h' }),
    )
    .option(
      '--max-jobs-per-sandbox <n>',
      'async exec jobs running at once in one sandbox (more get 429)',
      opt.int({ min: 1, max: 100_000 }),
      DEFAULT_JOB_LIMITS.maxRunning,
    )
    .addOption(
      option('--job-output-budget <size>', 'output of finished async jobs kept per sandbox (the oldest jobs are dropped first)', opt.size(), {
        value: DEFAULT_JOB_LIMITS.outputBudgetBytes,
        shown: `${DEFAULT_JOB_LIMITS.outputBudgetBytes >> 20}m`,
      }),
    )
    .addOption(
      option(
        '--memory-budget <size>',
        'memory requests may hold at once for captured output, JSON bodies and files read whole (past it output is truncated, ' +
          "saying so, and other such requests get 429); a command's first 64k per stream is never cut",
        opt.size(),
        { value: DEFAULT_MEMORY_LIMITS.budgetBytes, shown: `${DEFAULT_MEMORY_LIMITS.budgetBytes >> 20}m` },
      ),
    )
    .addOption(
      option('--max-output <size>', 'the largest max_output an exec or session run may ask for, per stream (more gets 422)', opt.size(), {
        value: DEFAULT_MEMORY_LIMITS.maxOutputBytes,
        shown: `${DEFAULT_MEMORY_LIMITS.maxOutputBytes >> 20}m`,
      }),
    )
    .option(
      '--sandbox-nice <n>',
      "niceness of the sandboxes' processes unless a create gives limits.nice (0 the host's default, 19 the lowest priority)",
      opt.int({ min: 0, max: 19 }),
      DEFAULT_SANDBOX_NICE,
    )
    .option(
      '--eval-dataset <spec>',
      '[NAME=]ROWS,SPECS: a dataset POST /v1/evaluate grades against, its rows and specs files (NAME: from the rows file, as build and score); repeatable',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option(
      '--allow-mount <dir[:rw]>',
      'a host dir whose paths creates may mount (read-only; :rw lets a create ask readonly: false); repeatable; default none',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option('--reports-dir <dir>', 'where evaluate calls with a run_id record their run (as score --report-dir)', 'logs/run_evaluation')
    .option(
      '--node-name <name>',
      "this node's name in a pool: every sandbox id ends in .NAME (default: $MINISANDBOX_NODE_NAME, else the host name; made a DNS label)",
    )
    .option(
      '--prefetch-dataset <[name=]file>',
      'pull <name>/<instance_id> for every row of a SWE-bench JSONL/JSON file into the store in the background (GET /v1/prefetch); repeatable',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .addOption(
      option('--prefetch-io-budget <size>', 'compressed bytes the start-up prefetch fetches at once', opt.size({ min: 1024 ** 2 }), {
        value: 256 * 1024 ** 2,
        shown: '256m',
      }),
    )
    .option('--ready-after-prefetch', 'GET /v1/health says ready=false (and ?ready=1 answers 503) until the start-up prefetch ended')
    .action(async (o: ServeOpts) => {
      checkDirOption('--reports-dir', o.reportsDir);
      // Signals are taken from the start: one that arrives while the server starts (reaping, listening)
      // shuts it down once it is up, instead of killing the process with sandboxes half made.
      let stopRequested = false;
      let onStop: (() => void) | undefined;
      const request = (): void => {
        stopRequested = true;
        onStop?.();
      };
      process.on('SIGTERM', request);
      process.on('SIGINT', request);
      const ctx = await makeContext(globals());
      const [{ parseListen, startServer }, { parseEvalDatasetOption }] = await Promise.all([
        import('../server/serve.js'),
        import('../server/eval-datasets.js'),
      ]);
      const evalDatasets = o.evalDataset.map(parseEvalDatasetOption);
      const srv = await startServer(ctx.registry, ctx.store, {
        listen: parseListen(o.listen),
        maxSandboxes: o.maxSandboxes,
        maxJobsPerSandbox: o.maxJobsPerSandbox,
        jobOutputBudgetBytes: o.jobOutputBudget,
        memoryBudgetBytes: o.memoryBudget,
        maxOutputBytes: o.maxOutput,
        sandboxNice: o.sandboxNice,
        idleTimeoutMs: o.idleTimeout,
        ttlMs: o.ttl,
        evalDatasets,
        reportsDir: o.reportsDir,
        allowMounts: o.allowMount,
        ...(o.tokenFile === undefined ? {} : { tokenFile: o.tokenFile }),
        // a Kubernetes Secret's value: one token for every node of a cluster
        ...(process.env.MINISANDBOX_TOKEN ? { token: process.env.MINISANDBOX_TOKEN } : {}),
        ...(o.nodeName === undefined ? {} : { nodeName: o.nodeName }),
        prefetchDatasets: o.prefetchDataset,
        prefetchIoBudget: o.prefetchIoBudget,
        readyAfterPrefetch: o.readyAfterPrefetch === true,
        version: packageVersion(),
      });
      // one JSON line on stdout: where to connect and where the token is (never the token itself)
      process.stdout.write(`${JSON.stringify({ listening: srv.url, token_file: srv.tokenFile })}\n`);
      await new Promise<void>((resolve) => {
        onStop = (): void => {
          onStop = undefined;
          process.off('SIGTERM', request);
          process.off('SIGINT', request);
          void srv.close().then(resolve, (e: unknown) => {
            process.stderr.write(`serve: shutdown failed: ${String(e)}\n`);
            setExit(1);
            resolve();
          });
        };
        if (stopRequested) onStop();
      });
    });
}

/** Syntax only here (so a typo exits 2 before anything starts); serve.ts splits it. */
function listenText(): z.ZodType<string, string> {
  return z.string().regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):\d{1,5}$/, 'use host:port, e.g. 127.0.0.1:7000 or [::1]:7000');
}
