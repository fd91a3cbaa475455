/**
 * POST /v1/evaluate: a trainer's reward call. The patch is graded as `score` grades a prediction
 * (score/evaluate.ts), in a fresh sandbox of the instance's environment made through the manager:
 * it counts against --max-sandboxes (429 when full) and in /v1/capacity, but it is the server's own
 * (not listed by GET /v1/sandboxes, not reachable by id); the shutdown ends it, and a client that
 * goes away kills it. Failing to make that sandbox is an error answer, never a grade; a grading that
 * could not judge the patch (timeout, error) says so in the answer's `status`, which a client must
 * read before it takes `resolved` for a reward. With a run_id the outcome is also recorded where
 * `score` records it (--reports-dir), with the environment's digest, so a `score` rerun reuses it.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { MinisandboxError, NotFoundError } from '../errors.js';
import { evalOpenOptions } from '../runtime/eval-runner.js';
import { evaluatePrediction } from '../score/evaluate.js';
import { type EvalSandbox, sandboxEvalRunner } from '../score/sandbox-runner.js';
import { type EvalDataset, findEvalInstance } from './eval-datasets.js';
import { type RouteContext, disconnectSignal, parse } from './http.js';
import type { EvaluationAnswer } from './response-schemas.js';
import { DurationSchema } from './schemas.js';

export interface EvaluateConfig {
  datasets: ReadonlyMap<string, EvalDataset>;
  /** Where run reports go (`score`'s --report-dir). */
  reportsDir: string;
}

/** One path component of a report directory (score's safeComponent, as a field check). */
const componentSchema = z
  .string()
  .min(1)
  .refine((s) => s !== '.' && s !== '..' && !s.includes('\0'), 'may not be "." or ".." or hold NUL');

export const EvaluateBodySchema = z.strictObject({
  dataset: z.string().min(1),
  instance_id: z.string().min(1),
  /** The model's diff; "" or null: an empty prediction (not run, not resolved). */
  patch: z.string().nullable(),
  /** model_name_or_path; default "None", as the harness names a missing one. */
  model: componentSchema.optional(),
  run_id: componentSchema.refine((s) => !s.includes('/'), 'may not hold "/"').optional(),
  /** Limit for the eval script; default 30 minutes, as `score`. */
  timeout: DurationSchema.optional(),
});

const DEFAULT_TIMEOUT_MS = 30 * 60_000;

export function evaluateRoutes(app: FastifyInstance, ctx: RouteContext, cfg: EvaluateConfig): void {
  const { mgr, log } = ctx;
  app.post('/v1/evaluate', async (req, reply): Promise<EvaluationAnswer> => {
    const b = parse(EvaluateBodySchema, req.body, 'body');
    if (ctx.reg === undefined || ctx.store === undefined)
      throw new MinisandboxError('NOT_CONFIGURED', 'this server has no store to make evaluation sandboxes from', {
        hint: 'evaluate through `minisandbox serve`',
      });
    const { ds, it } = findEvalInstance(cfg.datasets, b.dataset, b.instance_id);
    const signal = disconnectSignal(reply);
    const timeoutMs = b.timeout ?? DEFAULT_TIMEOUT_MS;
    const { open, maxOutputBytes } = evalOpenOptions();
    // the evaluation sandbox, once made; digest: the environment it was made of (what the verdict is of)
    let made: { id: string; gone: boolean; digest: string | undefined } | undefined;
    const destroy = async (): Promise<void> => {
      if (made === undefined || made.gone) return;
      made.gone = true;
      await mgr.destroy(made.id, { internal: true }).catch((e: unknown) => {
        // reaped meanwhile (TTL): nothing left to destroy
        if (!(e instanceof NotFoundError)) throw e;
      });
    };
    const sandbox = async (): Promise<EvalSandbox> => {
      const e = await mgr.create(
        it.ref,
        {
          ...open,
          signal,
          warn: (message) => log(JSON.stringify({ time: new Date().toISOString(), req: req.id, event: 'warning', message })),
        },
        // a little past the script's limit, so the timeout, not the TTL, ends a slow evaluation
        timeoutMs + 60_000,
        // the server's own: no client lists or reaches it, yet it holds a slot until it is destroyed
        { internal: true },
      );
      made = { id: e.sb.id, gone: false, digest: e.sb.origin?.env.digest };
      const id = e.sb.id;
      return { exec: (argv, o) => mgr.use(id, (x) => x.sb.exec(argv, o), { internal: true }), destroy };
    };
    try {
      const out = await evaluatePrediction(
        it.instance,
        it.spec,
        b.patch,
        async () => {
          const sb = await sandbox();
          return sandboxEvalRunner(async () => sb, { maxOutputBytes });
        },
        {
          timeoutS: timeoutMs / 1000,
          ...(b.model === undefined ? {} : { modelName: b.model }),
          ...(b.run_id === undefined ? {} : { record: { reportDir: cfg.reportsDir, runId: b.run_id, datasetIds: ds.ids }, environment: () => made?.digest }),
          signal,
        },
      );
      // the header for clients that read it there (before the answer carried the status)
      void reply.header('x-minisandbox-score-status', out.status);
      const entry = out.report[b.instance_id]!;
      return { [b.instance_id]: { ...entry, status: out.status, ...(out.error === undefined ? {} : { error: out.error }) } };
    } finally {
      await destroy();
    }
  });
}
